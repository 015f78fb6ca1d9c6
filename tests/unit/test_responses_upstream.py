"""The fake OpenAI's POST /v1/responses (tests/support/fakes/openai_responses_upstream.py) speaks
OpenAI's wire format: the official openai SDK reads it, plain and streamed, strictly typed; and it
refuses what OpenAI refuses, so that tests of the gateway against it mean something."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.support.fakes import openai_responses_upstream as responses_upstream
from tests.support.fakes.openai_upstream import FakeOpenAI
from tests.support.fakes.server import serve

EVENTS = TypeAdapter(ResponseStreamEvent)


@pytest.fixture(scope="module")
def fake():
    yield from serve(FakeOpenAI())


@pytest.fixture
def client(fake):
    with openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-fake", max_retries=0) as c:
        yield c


def test_a_plain_answer_is_an_openai_response(client, fake):
    answer = client.responses.create(model="m", input="Hi", instructions="Be brief.")
    assert answer.output_text == " w0 w1 w2 w3 w4 w5 w6 w7" and answer.status == "completed"
    Response.model_validate(responses_upstream.respond({"model": "m", "input": "Hi"}))  # the wire, typed
    assert fake.requests[-1]["path"] == "/v1/responses"


def test_a_stream_is_openais_event_sequence_without_done(client):
    stream = client.responses.create(model="m", input="Hi", max_output_tokens=3, stream=True)
    events = list(stream)
    for raw in responses_upstream.events({"model": "m", "input": "Hi", "max_output_tokens": 3, "stream": True}):
        EVENTS.validate_python(raw)  # each event on the wire is one of OpenAI's, typed
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.incomplete"
    assert events[-1].response.usage.output_tokens == 3
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == " w0 w1 w2"


def test_a_function_tool_is_called_and_its_output_taken_back_by_call_id(client):
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]
    first = client.responses.create(model="m", input="Paris?", tools=tools)
    [call] = first.output
    assert (call.type, call.name, call.arguments) == ("function_call", "lookup", '{"said": "Paris?"}')
    second = client.responses.create(model="m", tool_choice="none", tools=tools, input=[
        {"role": "user", "content": "Paris?"}, call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "France"}])
    assert second.output_text


@pytest.mark.parametrize(("body", "status", "says"), [
    ({"model": "m", "input": "x", "messages": []}, 400, "Unrecognized request argument supplied: messages"),
    ({"model": "m", "input": "x", "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools[0].name"),
    ({"model": "m", "input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}]}, 400,
     "No tool call found"),
    ({"model": "m", "input": "x", "previous_response_id": "resp_1"}, 404, "not found"),
    ({"model": "m", "input": "x", "max_output_tokens": 2.5}, 400, "max_output_tokens"),
])
def test_what_openai_refuses_is_refused_in_its_error_shape(fake, body, status, says):
    answer = httpx.post(fake.url + "/v1/responses", json=body, headers={"authorization": "Bearer sk-fake"})
    assert answer.status_code == status and says in answer.json()["error"]["message"]
    assert answer.json()["error"]["type"] == "invalid_request_error"


def test_only_openais_server_has_the_responses_api():
    for fake in serve(FakeOpenAI(server="vllm")):
        with openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-fake", max_retries=0) as c:
            with pytest.raises(openai.NotFoundError):
                c.responses.create(model="m", input="Hi")
