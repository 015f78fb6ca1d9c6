"""The OpenAI Agents SDK (`openai-agents`) running a tool-using agent through /v5/responses, plain
and streamed, on the Anthropic adapter (bridged: the fake Messages API calls the agent's tool, then
answers from its result) and on OpenAI's own Responses API (native: the fake's `/v1/responses`):
what the SDK sends is served, its tool's call id goes round, usage is counted."""

from __future__ import annotations

import asyncio

import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

set_tracing_disabled(True)  # the SDK's traces go to OpenAI's servers otherwise


def _agent(vendors_gateway, database, calls: list[str], model: str = "anthropic/brief") -> Agent:
    @function_tool
    def lookup(said: str) -> str:
        """Look up what was said."""
        calls.append(said)
        return "forty-two"

    client = openai.AsyncOpenAI(api_key=database.key, base_url=f"{vendors_gateway.url}/v5", max_retries=0)
    return Agent(name="looker", instructions="Use the lookup tool.", tools=[lookup],
                 model=OpenAIResponsesModel(model=model, openai_client=client))


def _run(agent: Agent, stream: bool):
    async def run():
        if not stream:
            return await Runner.run(agent, "hello there")
        result = Runner.run_streamed(agent, "hello there")
        kinds = [event.type async for event in result.stream_events()]
        assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
        return result

    return asyncio.run(run())


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_using_agent(vclient, vendors_gateway, database, anthropic_upstream, stream):
    calls: list[str] = []
    result = _run(_agent(vendors_gateway, database, calls), stream)
    assert calls == ["hello there"]  # the vendor's call reached the agent's tool
    assert result.final_output  # and the vendor answered from its result
    first, second = (request["body"] for request in anthropic_upstream.requests)
    assert first["tools"][0]["name"] == "lookup"
    result_block = second["messages"][-1]["content"][0]
    assert result_block["type"] == "tool_result" and result_block["tool_use_id"] == "toolu_0"
    usage = result.context_wrapper.usage
    assert usage.requests == 2 and usage.input_tokens > 0 and usage.output_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_using_agent_on_openais_own_responses_api(vclient, vendors_gateway, database, upstream, stream):
    calls: list[str] = []
    result = _run(_agent(vendors_gateway, database, calls, model="bare/m"), stream)
    assert calls == ["hello there"] and result.final_output
    first, second = (r["body"] for r in upstream.requests if r["path"] == "/v1/responses")
    assert first["tools"][0]["name"] == "lookup" and second["store"] is False
    call, output = second["input"][-2:]
    assert (call["type"], output["type"], output["call_id"]) == ("function_call", "function_call_output", call["call_id"])
    usage = result.context_wrapper.usage
    assert usage.requests == 2 and usage.input_tokens > 0 and usage.output_tokens > 0
