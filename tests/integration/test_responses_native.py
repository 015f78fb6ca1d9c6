"""POST /v5/responses on a vendor with the Responses API itself (the fake OpenAI's `/v1/responses`,
which checks OpenAI's wire: tests/support/fakes/openai_responses_upstream.py), through the official
openai SDK: the vendor is sent the whole conversation statelessly (`store: false`, never a
`previous_response_id`, reasoning state asked for), the answer and its events are the contract's
with the gateway's id, the usage is the vendor's and reconciles with the ledger to the token, the
stored response is retrieved, listed and deleted; a stream the vendor cuts or ends without usage
still ends with exactly one terminal event carrying usage, billed; a vendor that ignores a forced
tool or the JSON format asked for fails (502, or `response.failed`), never a success; what the
contract has no place for is refused by name before the vendor is asked."""

from __future__ import annotations

import json

import openai
import pytest
from scale_gp_beta import SGPClient

from tests.support.chat import row as ledger_row

TOOLS = [{"type": "function", "name": "lookup", "description": "the lookup tool",
          "parameters": {"type": "object", "properties": {"said": {"type": "string"}}, "required": ["said"]}}]


@pytest.fixture
def oai(gateway, database):
    return openai.OpenAI(api_key=database.key, base_url=f"{gateway.url}/v5", max_retries=0)


def _create(oai, stream: bool, **asked):
    """The response, and the events when streamed (each numbered from 0, one terminal event last)."""
    if not stream:
        return oai.responses.create(**asked), []
    events = list(oai.responses.create(**asked, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    terminal = [e for e in events if e.type in ("response.completed", "response.incomplete", "response.failed")]
    assert terminal == [events[-1]]
    return events[-1].response, events


def _failure(oai, stream: bool, **asked) -> tuple[str, str]:
    """The message and request id of a response the vendor failed: a 502, or a stream's
    `response.failed` once it began."""
    if not stream:
        with pytest.raises(openai.APIStatusError) as failed:
            oai.responses.create(**asked)
        assert failed.value.status_code == 502
        return failed.value.body["message"], failed.value.response.headers["x-request-id"]
    answered, _ = _create(oai, stream, **asked)
    assert answered.status == "failed" and answered.error.code == "server_error"
    return answered.error.message, answered.id


def _sent(upstream) -> list[dict]:
    return [r["body"] for r in upstream.requests if r["path"] == "/v1/responses"]


def _reconciles(database_url: str, response) -> dict:
    found = ledger_row(database_url, response.id)
    assert (found["endpoint"], found["model"]) == ("responses", response.model)
    assert (found["prompt_tokens"], found["completion_tokens"], found["total_tokens"]) == (
        response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens)
    return found


@pytest.mark.parametrize("stream", [False, True])
def test_a_conversation_goes_to_the_vendors_own_api_statelessly(oai, upstream, database, stream):
    first, events = _create(oai, stream, model="fake/m", input="hello there", instructions="be brief",
                            metadata={"k": "v"}, max_output_tokens=3)
    assert first.id.startswith("resp_") and first.id != "resp_fake"  # the gateway's id, not the vendor's
    assert (first.model, first.status, first.output_text) == ("fake/m", "incomplete", " w0 w1 w2")
    assert first.incomplete_details.reason == "max_output_tokens" and first.metadata == {"k": "v"}
    (sent,) = _sent(upstream)
    assert sent["model"] == "m" and sent["store"] is False and sent["include"] == ["reasoning.encrypted_content"]
    assert "metadata" not in sent and "previous_response_id" not in sent and sent["instructions"] == "be brief"
    if stream:
        kinds = [e.type for e in events]
        assert kinds[:2] == ["response.created", "response.in_progress"] and kinds.count(
            "response.output_text.delta") == 3
        assert {e.response.id for e in events if hasattr(e, "response")} == {first.id}
    _reconciles(database.url, first)

    second, _ = _create(oai, stream, model="fake/m", previous_response_id=first.id, input="and then?")
    assert second.previous_response_id == first.id and second.instructions is None
    conversation = _sent(upstream)[1]["input"]
    assert [(i.get("role"), i["type"]) for i in conversation] == [
        ("user", "message"), ("assistant", "message"), ("user", "message")]
    assert "id" not in conversation[0] and conversation[1]["id"] == "msg_fake0"  # the vendor's own item id
    assert "instructions" not in _sent(upstream)[1]  # not carried over, as on OpenAI
    assert second.usage.input_tokens > first.usage.input_tokens  # the vendor counted the whole conversation
    _reconciles(database.url, second)

    assert oai.responses.retrieve(second.id).output_text == second.output_text
    items = oai.responses.input_items.list(second.id)
    assert [i.type for i in items.data] == ["message"] and items.data[0].content[0].text == "and then?"
    assert oai.responses.delete(first.id) is None
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(first.id)


@pytest.mark.parametrize("stream", [False, True])
def test_function_tools_over_two_turns_keep_the_vendors_call_ids(oai, upstream, database, stream):
    first, events = _create(oai, stream, model="fake/m", input="Paris?", tools=TOOLS, tool_choice="required")
    (call,) = first.output
    assert (call.type, call.name, call.call_id) == ("function_call", "lookup", "call_fake0")
    assert json.loads(call.arguments) == {"said": "Paris?"}
    if stream:
        deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        assert deltas == call.arguments
    assert _sent(upstream)[0]["tools"] == TOOLS  # flat, as the Responses API takes them
    second, _ = _create(oai, stream, model="fake/m", previous_response_id=first.id, tools=TOOLS, tool_choice="none",
                        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "France"}])
    assert second.status == "completed" and second.output_text  # the fake found the call its output names
    for response in (first, second):
        _reconciles(database.url, response)


def test_a_stream_the_vendor_cuts_fails_with_the_usage_consumed_billed(oai, database):
    failed, events = _create(oai, True, model="fake/cut-stream", input="hello")
    assert failed.status == "failed" and failed.error.code == "server_error"
    assert [e.type for e in events].count("response.output_text.delta") == 1
    assert failed.output[0].status == "incomplete" and failed.output_text == " w0"
    assert failed.usage is not None and failed.usage.output_tokens >= 1  # the gateway's count of what was sent
    row = _reconciles(database.url, failed)
    assert row["estimated"] and row["outcome"] != "completed"


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_without_usage_is_counted_and_billed(oai, database, stream):
    answered, _ = _create(oai, stream, model="fake/no-usage", input="hello", max_output_tokens=2)
    assert answered.output_text == " w0 w1" and answered.usage.output_tokens > 0
    assert _reconciles(database.url, answered)["estimated"]


def test_what_the_contract_has_no_place_for_is_refused_before_the_vendor_is_asked(oai, upstream):
    with pytest.raises(openai.BadRequestError) as refused:
        oai.responses.create(model="fake/m", input="hi", tools=[{"type": "web_search"}])
    assert (refused.value.body["param"], refused.value.body["vendor"]) == ("tools[0]", "fake")
    assert _sent(upstream) == []


def test_a_vendors_refusal_is_its_own_and_bills_nothing(oai, upstream, database):
    with pytest.raises(openai.BadRequestError) as refused:  # the fake refuses a call output of no call, as OpenAI
        oai.responses.create(model="fake/m", input=[{"type": "function_call_output", "call_id": "nowhere",
                                                     "output": "x"}])
    row = ledger_row(database.url, refused.value.response.headers["x-request-id"])
    assert row["total_tokens"] == 0 and row["cost_nanos"] in (0, None) and row["outcome"] == "rejected"


@pytest.mark.parametrize("stream", [False, True])
def test_a_vendor_that_ignores_what_it_was_asked_fails_never_a_success(oai, database, stream):
    asked = [{"model": "fake/ignores-tools", "tools": TOOLS, "tool_choice": "required"},
             {"model": "fake/ignores-format", "text": {"format": {"type": "json_object"}}}]
    for request in asked:
        message, request_id = _failure(oai, stream, input="hello", **request)
        assert ("tool_choice" if "tools" in request else "text.format") in message
        assert ledger_row(database.url, request_id)["outcome"] != "completed"


def test_the_scale_sdk_creates_a_response_on_openais_own_api(gateway, upstream, database):
    sgp = SGPClient(api_key=database.key, account_id="acct-a", base_url=gateway.url, max_retries=0)
    answer = sgp.responses.create(model="fake/m", input="hello there", max_output_tokens=2).model_dump()
    assert answer["id"].startswith("resp_") and answer["status"] == "incomplete"
    assert answer["output"][0]["content"][0]["text"] == " w0 w1" and answer["usage"]["output_tokens"] == 2
    assert _sent(upstream)[0]["store"] is False


def test_a_strict_json_format_is_served_and_held_to_its_schema(oai, upstream):
    said = {"type": "object", "properties": {"said": {"type": "string"}}, "required": ["said"],
            "additionalProperties": False}
    text = {"format": {"type": "json_schema", "name": "said", "schema": said, "strict": True}}
    answered = oai.responses.create(model="fake/m", input="hello", text=text)
    assert answered.status == "completed" and json.loads(answered.output_text) == {"said": "hello"}
    assert _sent(upstream)[0]["text"] == text  # the vendor's own format, as the client wrote it
    with pytest.raises(openai.APIStatusError) as failed:  # the same format, an answer it does not match
        oai.responses.create(model="fake/m", input="hello",
                             text={"format": {**text["format"], "schema": {**said, "required": ["other"]}}})
    assert failed.value.status_code == 502 and "strict json_schema" in failed.value.body["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_state_goes_round_a_stateless_conversation(oai, upstream, database, stream):
    first, events = _create(oai, stream, model="fake/reasons", input="think first")
    reasoning, message = first.output
    assert (reasoning.type, reasoning.id, reasoning.encrypted_content) == ("reasoning", "rs_fake0", "opaque-state")
    assert reasoning.summary[0].text == "thought it over" and message.type == "message"
    assert first.usage.output_tokens_details.reasoning_tokens == 3
    assert _reconciles(database.url, first)["completion_tokens"] == first.usage.output_tokens
    second, _ = _create(oai, stream, model="fake/reasons", previous_response_id=first.id, input="and now?")
    assert second.status == "completed"  # the vendor took its own reasoning back (it refuses it without its state)
    handed = [item for item in _sent(upstream)[1]["input"] if item["type"] == "reasoning"]
    assert handed == [{"type": "reasoning", "id": "rs_fake0", "status": "completed", "encrypted_content": "opaque-state",
                       "summary": [{"type": "summary_text", "text": "thought it over"}]}]


def test_a_vendors_error_event_ends_the_stream_failed_its_key_never_shown(oai, database):
    failed, events = _create(oai, True, model="fake/error-event", input="hello")
    assert failed.status == "failed" and "the model broke" in failed.error.message
    assert "sk-" not in failed.error.message  # the vendor's key redacted
    assert [e.type for e in events][:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert ledger_row(database.url, failed.id)["outcome"] != "completed"
