"""gateway/endpoints/responses/native.py: a vendor with the Responses API itself (the fake OpenAI's
own wire format), sent the conversation statelessly and read back into the contract's shapes."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.core import client_schemas
from gateway.core.errors import ValidationFailed
from gateway.endpoints.responses import rules
from gateway.endpoints.responses.answer import response_from_chat
from gateway.endpoints.responses.native import (
    NativeStream,
    Unexpected,
    chat_choice,
    from_native,
    native_request,
    unmet,
)
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


@pytest.mark.parametrize(("part", "param"), [
    ({"type": "input_image", "file_id": "file-theirs"}, "input[0].content[1].file_id"),
    ({"type": "input_file", "file_data": "data:application/pdf;base64,AAAA"}, "input[0].content[1]"),
])
def test_a_part_naming_a_file_is_refused_on_the_vendors_own_api_too(part, param):
    content = [{"type": "input_text", "text": "see"}, part]
    with pytest.raises(Refused) as refused:
        native_request({"model": "openai/gpt-4o", "input": [{"type": "message", "role": "user", "content": content}]})
    assert refused.value.param == param
    output = [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
              {"type": "function_call_output", "call_id": "c", "output": [part]}]
    with pytest.raises(Refused) as refused:
        native_request({"model": "openai/gpt-4o", "input": output})
    assert refused.value.param.startswith("input[1].output[0]")


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


TOOLS = [{"type": "function", "name": "lookup"}, {"type": "function", "name": "other"}]


def _answer(request: dict) -> dict:
    return from_native(fake.respond({"model": "m", **request}), REQUEST, response_id="r", created_at=1, model="o/m")


@pytest.mark.parametrize(("asked", "answered", "why"), [
    ({"tools": TOOLS, "tool_choice": "required"}, {"model": "ignores-tools"}, 'tool_choice was "required"'),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "other"}}, {"tool_choice": "auto"},
     "without calling other"),
    ({"text": {"format": {"type": "json_object"}}}, {"text": {"format": {"type": "text"}}},
     "not the JSON text.format asked for"),
    ({"text": {"format": {"type": "json_object"}}}, {}, None),
    ({"tools": TOOLS, "tool_choice": "required"}, {}, None),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "other"}}, {}, None),
    ({"text": {"format": {"type": "json_object"}}}, {"max_output_tokens": 2}, None),  # cut short: as it says
])
def test_a_response_is_held_to_what_the_vendor_was_asked(asked, answered, why):
    request = {"model": "m", "input": "Hi", **asked}
    found = unmet(request, _answer({**request, **answered}))
    assert (found is None) if why is None else (why in found)


def test_json_text_is_held_to_a_strict_schema():
    schema = client_schemas.compiled({"type": "object", "required": ["a"]}, rules.FORMAT_SCHEMA)
    request = {"text": {"format": {"type": "json_schema", "name": "n", "schema": {}, "strict": True}}}
    made = _answer({"input": "Hi"})
    made["output"][0]["content"][0]["text"] = '{"b": 1}'
    assert "does not match" in unmet(request, made, schema)
    made["output"][0]["content"][0]["text"] = '{"a": 1}'
    assert unmet(request, made, schema) is None


def test_a_requests_schemas_are_bounded_and_fetch_nothing_on_every_vendor():
    remote = {"$ref": "https://example.invalid/schema.json"}
    with pytest.raises(ValidationFailed) as refused:
        rules.check({"tools": [{"type": "function", "name": "f", "parameters": remote}]})
    assert refused.value.detail[0]["loc"] == ["body", "tools", 0, "parameters", "$ref"]
    with pytest.raises(ValidationFailed) as refused:
        rules.check({"text": {"format": {"type": "json_schema", "name": "n", "schema": remote, "strict": True}}})
    assert refused.value.detail[0]["loc"][:4] == ["body", "text", "format", "schema"]
    rules.check({"tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]})


@pytest.mark.parametrize("asked", [{}, {"max_output_tokens": 2}, {"tools": TOOLS, "tool_choice": "required"}])
def test_a_cache_entry_of_a_native_answer_makes_the_same_response_again(asked):
    made = _answer({"input": "Hi", **asked})
    choice = chat_choice(made)
    completion = {"choices": [{"index": 0, "finish_reason": choice.finish_reason, "message": {
        "role": "assistant", "content": choice.text or None, "refusal": choice.refusal,
        "tool_calls": choice.tool_calls}}], "usage": None}
    again = response_from_chat(REQUEST, completion, response_id="r2", created_at=2, model="o/m")
    assert (again["status"], again["incomplete_details"]) == (made["status"], made["incomplete_details"])
    assert _but_ids(again["output"]) == _but_ids(made["output"])  # a hit's items get ids of their own


def _but_ids(items: list[dict]) -> list[dict]:
    """Items without their ids (and empty logprobs, which a vendor's text parts carry)."""
    kept = [{k: v for k, v in item.items() if k != "id"} for item in items]
    for item in kept:
        if "content" in item:
            item["content"] = [{k: v for k, v in part.items() if k != "logprobs"} for part in item["content"]]
    return kept


def test_an_answer_with_reasoning_state_is_not_cached():
    made = _answer({"input": "Hi"})
    made["output"].insert(0, {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"})
    assert chat_choice(made) is None


@pytest.mark.parametrize(("model", "text"), [("m", " w0 w1 w2 w3"), ("cut-stream", " w0")])
def test_every_event_says_what_it_said_when_it_was_made(model, text):
    """Events of a batch are written together: none may change after it was made (one carrying an
    item or part that later deltas grow, say)."""
    stream = NativeStream(REQUEST, response_id="resp_ours", created_at=5, model="openai/gpt-4o")
    made = []
    for raw in fake.events({"model": model, "input": "Hi", "max_output_tokens": 4}):
        made += [(event, json.dumps(event)) for event in stream.feed(raw)]
    made += [(event, json.dumps(event)) for event in stream.end()]
    assert [json.loads(text) for _, text in made] == [event for event, _ in made]
    assert made[-1][0]["response"]["output"][0]["content"][0]["text"] == text  # the end holds it all
