"""openapi.json's Responses operations: shaped as the house's, taking exactly what the SDKs send
(the openai SDK and scale-gp-beta, their requests captured as they serialise them), answering
what the bridge makes (checked with the contract's own JSON Schema, closed objects and bounds)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import openai
import pytest
from scale_gp_beta import SGPClient

from gateway.core.chat import ChatChoice
from gateway.endpoints.responses.answer import response_from_chat
from gateway.endpoints.responses.stream import ResponseStream
from tests.support.fakes import openai_responses_upstream as fake

SPEC = json.loads((Path(__file__).resolve().parents[2] / "openapi.json").read_text())
OPERATIONS = {("post", "/v5/responses"): "POST-V5-/v5/responses",
              ("get", "/v5/responses/{response_id}"): "GET-V5-/v5/responses/{response_id}",
              ("delete", "/v5/responses/{response_id}"): "DELETE-V5-/v5/responses/{response_id}",
              ("get", "/v5/responses/{response_id}/input_items"): "GET-V5-/v5/responses/{response_id}/input_items"}


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": SPEC["components"]})


def valid(name: str, value) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator(name).iter_errors(value)]


@pytest.mark.parametrize(("where", "operation_id"), OPERATIONS.items())
def test_each_operation_is_named_in_the_house_style_and_needs_the_inference_scope_as_chat(where, operation_id):
    method, path = where
    operation = SPEC["paths"][path][method]
    assert operation["operationId"] == operation_id
    assert operation["security"] == SPEC["paths"]["/v5/chat/completions"]["post"]["security"]
    assert {"200", "401", "403", "404", "422", "500"} <= set(operation["responses"])


def test_the_usage_lines_endpoint_is_an_open_string_naming_the_known_ones():
    endpoint = SPEC["components"]["schemas"]["UsageLine"]["properties"]["endpoint"]
    assert "enum" not in endpoint and endpoint["type"] == "string"
    assert all(f"`{name}`" in endpoint["description"] for name in ("completions", "chat", "responses", "inference"))


def captured(send) -> list[dict]:
    """The bodies `send(http_client)` makes an SDK post, answered with the fake's response."""
    bodies: list[dict] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        return httpx.Response(200, json=fake.respond({"model": "m", "input": "x"}))

    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        send(http)
    return bodies


TOOLS = [{"type": "function", "name": "lookup", "description": "Look up.", "strict": True,
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"],
                         "additionalProperties": False}}]
CALLS = {
    "text": {"input": "Hi"},
    "everything": {"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 16, "temperature": 0.2,
                   "top_p": 0.9, "tools": TOOLS, "tool_choice": {"type": "function", "name": "lookup"},
                   "parallel_tool_calls": False, "metadata": {"k": "v"}, "store": False, "truncation": "disabled",
                   "reasoning": {"effort": "low"}, "include": ["reasoning.encrypted_content"], "user": "u1",
                   "previous_response_id": "resp_abc",
                   "text": {"format": {"type": "json_schema", "name": "city", "strict": True,
                                       "schema": {"type": "object", "properties": {}}}}},
    "items": {"input": [
        {"role": "user", "content": [{"type": "input_text", "text": "see"},
                                     {"type": "input_image", "image_url": "data:image/png;base64,AA==",
                                      "detail": "auto"}]},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "calling", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup", "arguments": "{}",
         "status": "completed"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        {"type": "function_call_output", "call_id": "call_1", "output": "France"},
        {"role": "developer", "content": "answer now"}], "tools": TOOLS},
}


@pytest.mark.parametrize("name", CALLS)
def test_the_contract_takes_what_the_openai_sdk_sends(name):
    def send(http):
        with openai.OpenAI(base_url="http://gateway.test/v5", api_key="k", http_client=http, max_retries=0) as c:
            c.responses.create(model="openai/gpt-4o", **CALLS[name])
    [body] = captured(send)
    assert valid("ResponseCreateRequest", body) == []


def test_the_contract_takes_what_scale_gp_beta_sends():
    def send(http):
        client = SGPClient(api_key="k", account_id="acct", base_url="http://gateway.test", http_client=http,
                           max_retries=0)
        sent = {name: value for name, value in CALLS["everything"].items() if name != "user"}  # it has no `user`
        client.responses.create(model="openai/gpt-4o", **sent)
    [body] = captured(send)
    assert valid("ResponseCreateRequest", body) == []


@pytest.mark.parametrize(("body", "where"), [
    ({"model": "openai/gpt-4o"}, "input"),
    ({"model": "openai/gpt-4o", "input": "x", "messages": []}, "messages"),
    ({"model": "openai/gpt-4o", "input": "x", "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ({"model": "openai/gpt-4o", "input": [{"type": "computer_call_output", "call_id": "c"}]}, "input"),
    ({"model": "openai/gpt-4o", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "openai/gpt-4o", "input": "x", "metadata": {str(i): "v" for i in range(17)}}, "metadata"),
])
def test_what_is_not_openais_request_is_a_contract_error(body, where):
    problems = valid("ResponseCreateRequest", body)
    assert problems and where in json.dumps(problems)


def test_a_built_in_tool_passes_the_contract_so_that_it_is_refused_by_name():
    body = {"model": "openai/gpt-4o", "input": "x", "tools": [{"type": "web_search"}]}
    assert valid("ResponseCreateRequest", body) == []


def test_what_the_bridge_makes_is_the_contracts_response_and_events():
    request = {"model": "fake/m", "input": "Hi", "tools": TOOLS[:1]}
    made = response_from_chat(request, {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "ok", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}},
        response_id="resp_1", created_at=1, model="fake/m")
    assert valid("Response", made) == []
    stream = ResponseStream(request, response_id="resp_2", created_at=1, model="fake/m")
    events = stream.start() + stream.feed([ChatChoice(0, "ok")]) + stream.end(
        error={"code": "vendor_error", "message": "cut"})
    for event in events:
        assert valid("ResponseStreamEvent", {"event": event["type"], "data": json.dumps(event)}) == []
        if "response" in event:
            assert valid("Response", event["response"]) == []


def test_the_lists_and_the_deletion_are_openais_objects():
    item = {"type": "message", "id": "msg_1", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    assert valid("ResponseInputItemList", {"object": "list", "data": [item], "first_id": "msg_1",
                                           "last_id": "msg_1", "has_more": False}) == []
    assert valid("ResponseDeleted", {"id": "resp_1", "object": "response", "deleted": True}) == []
