"""gateway/endpoints/responses/native.py: a vendor with the Responses API itself (the fake OpenAI's
own wire format), sent the conversation statelessly and read back into the contract's shapes."""

from __future__ import annotations

import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.endpoints.responses.native import NativeStream, Unexpected, from_native, native_request
from gateway.endpoints.responses.request import Refused
from generated.models import Response

OPENAI_EVENTS = TypeAdapter(ResponseStreamEvent)
from tests.support.fakes import openai_responses_upstream as fake

HISTORY = [{"type": "message", "id": "msg_a", "role": "user", "content": [{"type": "input_text", "text": "Paris?"}]},
           {"type": "function_call", "id": "fc_a", "call_id": "toolu_1", "name": "lookup", "arguments": "{}",
            "status": "completed"}]
REQUEST = {"model": "openai/gpt-4o", "previous_response_id": "resp_prev", "metadata": {"k": "v"}, "store": True,
           "input": [{"type": "function_call_output", "call_id": "toolu_1", "output": "France"}],
           "instructions": "Be brief."}


def test_the_vendor_is_sent_the_whole_conversation_statelessly_and_takes_it():
    body = native_request(REQUEST, HISTORY)
    user = {name: value for name, value in HISTORY[0].items() if name != "id"}  # the gateway's id stays here
    assert body["input"] == [user, HISTORY[1], *REQUEST["input"]] and body["store"] is False
    assert "previous_response_id" not in body and "metadata" not in body
    assert body["include"] == ["reasoning.encrypted_content"] and body["instructions"] == "Be brief."
    assert fake.wire_problem(body | {"model": "m"}) is None  # OpenAI's own checks pass, call ids included


def test_a_built_in_tool_is_refused_by_name():
    with pytest.raises(Refused) as refused:
        native_request({"model": "openai/gpt-4o", "input": "x",
                        "tools": [{"type": "function", "name": "f"}, {"type": "web_search"}]})
    assert refused.value.param == "tools[1]"


def test_the_vendors_usage_is_read_as_untrusted_counts():
    answer = fake.respond({"model": "m", "input": "Hi"})
    answer["usage"]["output_tokens"] = "many"
    with pytest.raises(ValueError):
        from_native(answer, REQUEST, response_id="resp_ours", created_at=5, model="openai/gpt-4o")


def test_an_include_outside_the_contract_is_refused_by_name():
    with pytest.raises(Refused) as refused:
        native_request({"model": "openai/gpt-4o", "input": "x", "include": ["message.output_text.logprobs"]})
    assert refused.value.param == "include[0]"


def test_the_answer_is_the_requests_echo_with_the_vendors_outcome():
    answer = fake.respond({"model": "m", "input": "Hi", "max_output_tokens": 3})
    made = from_native(answer, REQUEST, response_id="resp_ours", created_at=5, model="openai/gpt-4o")
    Response.model_validate(made)  # closed: nothing of the vendor's beyond the contract
    assert (made["id"], made["model"], made["metadata"], made["previous_response_id"]) == (
        "resp_ours", "openai/gpt-4o", {"k": "v"}, "resp_prev")
    assert made["status"] == "incomplete" and made["incomplete_details"] == {"reason": "max_output_tokens"}
    assert made["usage"]["output_tokens"] == 3 and made["usage"]["input_tokens_details"]["cache_write_tokens"] == 0


def test_an_item_the_contract_has_no_place_for_is_unexpected():
    answer = fake.respond({"model": "m", "input": "Hi"})
    answer["output"].append({"type": "web_search_call", "id": "ws_1", "status": "completed"})
    with pytest.raises(Unexpected):
        from_native(answer, REQUEST, response_id="resp_ours", created_at=5, model="openai/gpt-4o")


@pytest.mark.parametrize("tools", [[], [{"type": "function", "name": "lookup"}]])
def test_the_vendors_events_are_kept_to_the_contract_and_renumbered(tools):
    stream = NativeStream(REQUEST, response_id="resp_ours", created_at=5, model="openai/gpt-4o")
    sent = [e for raw in [{"type": "response.queued", "sequence_number": 0}]
            + fake.events({"model": "m", "input": "Hi", "tools": tools}) for e in stream.feed(raw)]
    sent += stream.end()
    assert [e["sequence_number"] for e in sent] == list(range(len(sent)))
    assert sent[0]["type"] == "response.created" and sent[-1]["type"] == "response.completed"
    for event in sent:
        OPENAI_EVENTS.validate_python(event)  # as the openai SDK types them, strictly
        if "response" in event:
            Response.model_validate(event["response"])
            assert event["response"]["id"] == "resp_ours"
    assert stream.response == sent[-1]["response"]


def test_a_stream_the_vendor_cuts_ends_incomplete_with_what_it_said():
    stream = NativeStream(REQUEST, response_id="resp_ours", created_at=5, model="openai/gpt-4o")
    sent = [e for raw in fake.events({"model": "cut-stream", "input": "Hi"}) for e in stream.feed(raw)]
    end = stream.end(usage={"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3})
    assert [e["type"] for e in end] == ["response.output_item.done", "response.failed"]
    assert end[-1]["response"]["error"]["code"] == "server_error"
    final = end[-1]["response"]
    Response.model_validate(final)
    assert final["output"][0]["content"][0]["text"] == " w0" and final["output"][0]["status"] == "incomplete"
    assert final["usage"]["total_tokens"] == 3 and end[0]["sequence_number"] == len(sent)
    assert stream.end() == []


def test_a_client_that_leaves_a_native_stream_leaves_it_incomplete():
    stream = NativeStream(REQUEST, response_id="resp_ours", created_at=5, model="openai/gpt-4o")
    for raw in fake.events({"model": "cut-stream", "input": "Hi"}):
        stream.feed(raw)
    final = stream.end(client_left=True)[-1]
    assert final["type"] == "response.incomplete" and final["response"]["incomplete_details"] == {"reason": None}
