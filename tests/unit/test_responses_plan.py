"""endpoints/responses/ (plan.py, unit.py) in-process with a scripted chat translator: the request
and its stored chain as one bridged call under the `responses` endpoint, what the vendor lacks
refused naming field and vendor, a compatible server's `max_tokens`, the demand, the cache's form,
and the answer and stream shaped from the chat choices."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.core.chat import ChatCall, ChatChoice
from gateway.core.clearance import CLEAR
from gateway.core.completion import Chunk, Result, Usage
from gateway.core.endpoint import Endpoint
from gateway.core.errors import UnsupportedParameter
from gateway.core.parameters import CHAT_PARAMETERS, Capabilities, Support, native, unsupported
from gateway.endpoints.responses.stream import ResponseStream
from gateway.endpoints.responses.unit import UNIT, AskedResponses
from gateway.vendors.registry import Registry


class ScriptedChat:
    """An adapter that is its own chat translator for responses: one tool call when tools are given, else text."""

    def __init__(self, support: dict[str, Support] | None = None) -> None:
        self.name = "v"
        self.capabilities = Capabilities.chat("scripted", {p: native() for p in CHAT_PARAMETERS} | (support or {}))
        self.translators = {Endpoint.RESPONSES: self}
        self.calls: list[ChatCall] = []

    def _choice(self, call: ChatCall) -> ChatChoice:
        if call.parameters.get("tools"):
            return ChatChoice(0, "", "tool_calls", tool_calls=[
                {"id": "toolu_9", "type": "function", "function": {"name": "f", "arguments": "{}"}}])
        return ChatChoice(0, "hello", "stop")

    async def complete(self, call: ChatCall) -> Result:
        self.calls.append(call)
        return Result([self._choice(call)], Usage(10, 2))

    async def stream(self, call: ChatCall) -> AsyncIterator[list[Chunk]]:
        self.calls.append(call)
        yield [Chunk([ChatChoice(0, "hel")])]
        yield [Chunk([ChatChoice(0, "lo", "stop")])]
        yield [Chunk([], Usage(10, 2))]


HISTORY = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "before"}]},
           {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "earlier", "annotations": []}]}]


def plan(adapter: ScriptedChat, history=(), **body: Any):
    asked = AskedResponses({"model": "v/m", "input": "hi", **body}, list(history))
    return UNIT.plan(asked, "v/m", Registry({"v": adapter}), 4, CLEAR)  # type: ignore[dict-item]


def test_the_chain_and_the_input_are_one_call_under_the_responses_endpoint():
    adapter = ScriptedChat()
    planned = plan(adapter, HISTORY, instructions="brief", max_output_tokens=7)
    result = asyncio.run(planned.complete())
    (call,) = adapter.calls
    assert call.endpoint is Endpoint.RESPONSES and planned.attempt().endpoint == "responses"
    assert [m["role"] for m in call.messages] == ["system", "user", "assistant", "user"]
    assert call.parameters == {"max_completion_tokens": 7}
    head = {"id": "resp_x", "created": 5, "model": "v/m"}
    answer = orjson.loads(UNIT.body(head, planned, result, result.usage))
    assert answer["output"][0]["content"][0]["text"] == "hello" and answer["status"] == "completed"
    assert answer["usage"]["input_tokens"] == 10 and answer["usage"]["total_tokens"] == 12
    assert planned.items == [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]


def test_a_tool_calls_id_is_the_vendors():
    adapter = ScriptedChat()
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    planned = plan(adapter, tools=tools)
    result = asyncio.run(planned.complete())
    answer = orjson.loads(UNIT.body({"id": "resp_x", "created": 5, "model": "v/m"}, planned, result, result.usage))
    assert [(i["type"], i["call_id"]) for i in answer["output"]] == [("function_call", "toolu_9")]


def test_what_the_vendor_lacks_is_refused_naming_field_and_vendor():
    adapter = ScriptedChat({"temperature": unsupported("no sampling")})
    with pytest.raises(UnsupportedParameter) as refused:
        plan(adapter, temperature=0.5)
    assert (refused.value.param, refused.value.vendor) == ("temperature", "v")
    with pytest.raises(UnsupportedParameter) as refused:
        plan(ScriptedChat(), include=["reasoning.encrypted_content"])
    assert refused.value.param == "include[0]"


def test_a_server_without_max_completion_tokens_is_sent_max_tokens():
    adapter = ScriptedChat({"max_completion_tokens": unsupported("old")})
    asyncio.run(plan(adapter, max_output_tokens=5).complete())
    assert adapter.calls[0].parameters == {"max_tokens": 5} and adapter.calls[0].model == "m"


def test_the_demand_counts_the_chain_and_the_cache_form_holds_it():
    adapter = ScriptedChat()
    asked = AskedResponses({"model": "v/m", "input": "hi", "max_output_tokens": 9, "metadata": {"a": "b"},
                            "previous_response_id": "resp_1", "temperature": 0}, HISTORY)
    demand = UNIT.demand(asked, plan(adapter, HISTORY), False)
    assert demand.endpoint is Endpoint.RESPONSES and "earlier" in demand.prompts_sent[0] and demand.completion_tokens == 9
    assert "earlier" in UNIT.demand(asked, None, True).prompts_sent[0]  # without a plan too
    form = UNIT.cache_form(asked)
    assert form["history"] == HISTORY and "metadata" not in form and "previous_response_id" not in form
    assert form["temperature"] == 0


def test_a_streams_choices_become_openais_events():
    adapter = ScriptedChat()
    planned = plan(adapter, stream=True)
    events = []
    stream = ResponseStream(dict(planned.request), response_id="resp_x", created_at=5, model="v/m")
    events += stream.start()

    async def read():
        async for batch in planned.chunks():
            for chunk in batch:
                events.extend(stream.feed(chunk.choices))
    asyncio.run(read())
    events += stream.end(usage={"prompt_tokens": 10, "completion_tokens": 2})
    assert events[-1]["type"] == "response.completed"
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "hello"
    assert events[-1]["response"]["usage"]["output_tokens"] == 2
