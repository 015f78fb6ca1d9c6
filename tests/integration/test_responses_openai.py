"""POST /v5/responses on the OpenAI protocol: on OpenAI's own server (the fake's `/v1/responses`,
native: tests/integration/test_responses_native.py has its wire), a client that leaves mid-stream
leaves the stored response `incomplete`; the caller's own OpenAI key is refused as chat refuses it;
an allow-list that does not name the model refuses it, its ledger row `responses`; a fallback
chain serves a failing model, stored and billed on the model that answered. On a compatible server
without the Responses API (vendor `compat`, bridged through its chat), a field chat cannot carry is
refused by name."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.support.environments import SHARED_TLS
from tests.support.processes import wait_until
from tests.support.provision import ledger_rows, new_key, run_cli


@pytest.fixture
def oai(gateway, database):
    return openai.OpenAI(api_key=database.key, base_url=f"{gateway.url}/v5", max_retries=0)


def test_a_client_that_leaves_mid_stream_leaves_it_incomplete(gateway, database, oai):
    headers = {"x-api-key": database.key}
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=30, verify=SHARED_TLS) as client, \
            client.stream("POST", "/v5/responses", json={"model": "fake/stall-later", "input": "hello",
                                                         "stream": True}) as answer:
        assert answer.status_code == 200
        response_id = None
        for line in answer.iter_lines():
            if line.startswith("data: ") and '"response.created"' in line:
                response_id = line.split('"id":"', 1)[1].split('"', 1)[0]
            if line.startswith("event: response.output_text.delta"):
                break  # and leave, the vendor still streaming
    assert response_id is not None and response_id.startswith("resp_")
    kept = wait_until(lambda: _kept(oai, response_id), message="the stored response's end")
    assert kept.status == "incomplete" and kept.incomplete_details.reason is None
    assert kept.output and kept.output[0].type == "message"


def _kept(oai, response_id):
    """The stored response once the gateway has seen its client leave (a stream is kept at its end,
    not while it runs: a 404 until then)."""
    try:
        return oai.responses.retrieve(response_id)
    except openai.NotFoundError:
        return None


def test_the_callers_openai_key_is_refused(gateway, database):
    answer = httpx.post(f"{gateway.url}/v5/responses", json={"model": "fake/m", "input": "hi"}, verify=SHARED_TLS,
                        headers={"x-api-key": database.key, "x-openai-api-key": "sk-mine"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "x-openai-api-key"


def test_what_chat_cannot_carry_is_refused_naming_field_and_vendor(vendors_gateway, vclient, database):
    compat = openai.OpenAI(api_key=database.key, base_url=f"{vendors_gateway.url}/v5", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        compat.responses.create(model="compat/m", input="hi", include=["reasoning.encrypted_content"])
    assert refused.value.body["param"] == "include[0]" and refused.value.body["vendor"] == "compat"
    with pytest.raises(openai.BadRequestError) as refused:
        compat.responses.create(model="compat/m", input="hi", truncation="auto")
    assert refused.value.body["param"] == "truncation"
    assert compat.responses.create(model="compat/m", input="hi", max_output_tokens=2).output_text == " w0 w1"


def test_an_allow_list_refuses_a_model_it_does_not_name(gateway, database):
    key, key_id, account = new_key(database.url)
    run_cli(database.url, "limits", "set", "--key", key_id, "--models", "fake/backup")  # read at the key's first use
    try:
        client = openai.OpenAI(api_key=key, base_url=f"{gateway.url}/v5", max_retries=0)
        with pytest.raises(openai.PermissionDeniedError) as refused:
            client.responses.create(model="fake/m", input="hello", max_output_tokens=2)
        request_id = refused.value.response.headers["x-request-id"]
        assert request_id.startswith("resp_")
        row = wait_until(lambda: next((r for r in ledger_rows(database.url, account) if r["request_id"] == request_id),
                                      None), message="the refusal's ledger row")
        assert (row["endpoint"], row["outcome"]) == ("responses", "refused")
        assert client.responses.create(model="fake/backup", input="hello", max_output_tokens=2).output_text == " w0 w1"
    finally:  # the session's database is shared: a key left with limits stops later multi-worker gateways
        run_cli(database.url, "keys", "revoke", key_id)


@pytest.mark.parametrize("stream", [False, True])
def test_a_fallback_serves_a_failing_model_stored_and_billed_on_the_one_that_answered(gateway, database, stream):
    key, _, account = new_key(database.url)
    answer = httpx.post(f"{gateway.url}/v5/responses", verify=SHARED_TLS, headers={"x-api-key": key}, timeout=30,
                        json={"model": "fake/fail-503", "input": "hello", "max_output_tokens": 2, "stream": stream})
    assert answer.status_code == 200, answer.text
    assert (answer.headers["x-gateway-model"], answer.headers["x-gateway-fallback-from"]) == (
        "fake/backup", "fake/fail-503")  # the shared gateway's GATEWAY_FALLBACKS
    if stream:
        events = [json.loads(line.removeprefix("data: ")) for line in answer.text.splitlines()
                  if line.startswith("data: ")]
        assert events[-1]["type"] == "response.incomplete"  # max_output_tokens reached
        answered = events[-1]["response"]
    else:
        answered = answer.json()
    assert (answered["model"], answered["status"], answered["incomplete_details"]) == (
        "fake/backup", "incomplete", {"reason": "max_output_tokens"})
    client = openai.OpenAI(api_key=key, base_url=f"{gateway.url}/v5", max_retries=0)
    stored = client.responses.retrieve(answered["id"])
    assert (stored.model, stored.status, stored.output_text) == ("fake/backup", "incomplete", " w0 w1")
    assert stored.usage.model_dump(exclude_none=True) == answered["usage"]
    row = wait_until(lambda: next((r for r in ledger_rows(database.url, account) if r["request_id"] == answered["id"]),
                                  None), message="the ledger row")
    assert (row["endpoint"], row["model"], row["fallback_from"], row["outcome"], row["streamed"]) == (
        "responses", "fake/backup", "fake/fail-503", "completed", stream)  # the vendor call completed
    usage = answered["usage"]
    assert (row["prompt_tokens"], row["completion_tokens"], row["total_tokens"]) == (
        usage["input_tokens"], usage["output_tokens"], usage["total_tokens"])
    assert len([r for r in ledger_rows(database.url, account) if r["endpoint"] == "responses"]) == 1
