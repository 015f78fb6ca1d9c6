"""POST /v5/responses through the Anthropic adapter (bridged through its chat translator to the fake
Messages API): function tools over two turns chained by `previous_response_id`, the call ids kept
both ways, plain and streamed; usage the ledger's; a vendor's failure before output unbilled, and
mid-stream `response.failed` with the usage consumed, billed."""

from __future__ import annotations

import json

import openai
import pytest
from scale_gp_beta import SGPClient

from tests.support.chat import row as ledger_row

TOOLS = [{"type": "function", "name": "lookup", "description": "the lookup tool", "strict": False,
          "parameters": {"type": "object", "properties": {"said": {"type": "string"}}, "required": ["said"]}}]


@pytest.fixture
def oai(vclient, vendors_gateway, database):
    return openai.OpenAI(api_key=database.key, base_url=f"{vendors_gateway.url}/v5", max_retries=0)


def _reconciles(database_url: str, response) -> None:
    found = ledger_row(database_url, response.id)
    assert found["endpoint"] == "responses"
    assert (found["prompt_tokens"], found["completion_tokens"]) == (response.usage.input_tokens,
                                                                     response.usage.output_tokens)


@pytest.mark.parametrize("stream", [False, True])
def test_two_turns_of_function_tools_chained(oai, anthropic_upstream, database, stream):
    def create(**asked):
        if not stream:
            return oai.responses.create(**asked)
        events = list(oai.responses.create(**asked, stream=True))
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[-1].type in ("response.completed", "response.incomplete")
        return events[-1].response

    first = create(model="anthropic/claude-x", input="hello there", tools=TOOLS, tool_choice="required",
                   instructions="use the tool")
    (call,) = first.output
    assert (call.type, call.name, call.call_id) == ("function_call", "lookup", "toolu_0")  # Anthropic's id, unchanged
    assert json.loads(call.arguments) == {"said": "hello there"}
    assert first.status == "completed" and first.usage.output_tokens > 0
    sent = anthropic_upstream.requests[0]["body"]
    assert sent["system"] == "use the tool" and sent["tool_choice"] == {"type": "any"}
    assert sent["tools"][0]["name"] == "lookup"

    second = create(model="anthropic/claude-x", previous_response_id=first.id, tools=TOOLS,
                    input=[{"type": "function_call_output", "call_id": call.call_id, "output": "42"}])
    assert second.previous_response_id == first.id and second.output_text
    messages = anthropic_upstream.requests[1]["body"]["messages"]
    assert "system" not in anthropic_upstream.requests[1]["body"]  # instructions are not carried over
    assert messages[1]["content"][-1]["type"] == "tool_use" and messages[1]["content"][-1]["id"] == "toolu_0"
    result = messages[2]["content"][0]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", "toolu_0")
    for response in (first, second):
        _reconciles(database.url, response)
    items = oai.responses.input_items.list(second.id, order="asc")
    assert [item.type for item in items.data] == ["function_call_output"]


def test_a_vendor_failing_before_output_is_a_502_unbilled(oai, database):
    with pytest.raises(openai.InternalServerError) as failed:
        oai.responses.create(model="anthropic/fail-500", input="hello there", max_output_tokens=2)
    assert failed.value.status_code == 502
    found = ledger_row(database.url, failed.value.response.headers["x-request-id"])
    assert found["endpoint"] == "responses" and not found["prompt_tokens"] and not found["completion_tokens"]


def test_a_stream_the_vendor_breaks_ends_failed_with_its_usage_billed(oai, database):
    events = list(oai.responses.create(model="anthropic/stream-error", input="hello there", max_output_tokens=3,
                                       stream=True))
    last = events[-1]
    assert last.type == "response.failed" and last.response.error.code == "server_error"
    assert last.response.usage.output_tokens > 0 and last.response.usage.input_tokens > 0
    assert [e.type for e in events].count("response.failed") == 1
    found = ledger_row(database.url, last.response.id)
    assert found["endpoint"] == "responses" and found["completion_tokens"] == last.response.usage.output_tokens
    assert oai.responses.retrieve(last.response.id).status == "failed"


def test_a_built_in_tool_is_refused_by_name(vclient):
    answer = vclient.post("/v5/responses", json={"model": "anthropic/claude-x", "input": "hi",
                                                 "tools": [{"type": "web_search"}]})
    assert answer.status_code in (400, 422), answer.text
    assert "tools" in answer.text


def test_the_scale_sdk_creates_a_response(vendors_gateway, vclient, database):
    sgp = SGPClient(api_key=database.key, account_id="acct-a", base_url=vendors_gateway.url, max_retries=0)
    answer = sgp.responses.create(model="anthropic/claude-x", input="hello there", max_output_tokens=2)
    data = answer.model_dump()
    assert data["id"].startswith("resp_") and data["status"] == "incomplete"
    assert data["output"][0]["content"][0]["text"] == " w0 w1"
    assert data["usage"]["output_tokens"] == 2
