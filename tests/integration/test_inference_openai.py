"""POST /v5/inference on the openai protocol: the client's chat completions body against the fake
OpenAI server (tests/support/fakes/openai_chat_upstream.py checks the wire shape), plain and
streamed, billed from its `usage`; its faults as 4xx passed back, 502 and 504, never billed."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.chat import row as ledger_row
from tests.support.environments import SHARED_TLS, UNREACHABLE_URL, UPSTREAM_SECRET, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.metrics import metric, scrape
from tests.support.processes import wait_until

USER = [{"role": "user", "content": "hello there"}]


def _data(answer):
    return [line.removeprefix("data: ") for line in answer.text.splitlines() if line.startswith("data: ")]


def _chats(upstream):
    return [r for r in upstream.requests if r["path"] == "/v1/chat/completions"]


def test_chat_body_as_written_billed_from_its_usage(client, database, upstream):
    args = {"messages": USER, "max_tokens": 3, "logit_bias": {"7": 1}, "n": 2}
    answer = client.post("/v5/inference", json={"model": "fake/m", "args": args})
    assert answer.status_code == 200, answer.text
    response = answer.json()["response"]
    assert response["object"] == "chat.completion" and len(response["choices"]) == 2
    sent = _chats(upstream)[0]
    assert sent["body"] == {**args, "model": "m"}
    assert sent["headers"]["authorization"] == f"Bearer {UPSTREAM_SECRET}"
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert (row["endpoint"], row["estimated"]) == ("inference", False)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (response["usage"]["prompt_tokens"],
                                                                response["usage"]["completion_tokens"])


def test_a_stream_is_billed_from_the_usage_the_gateway_asked_for_and_not_shown(client, database, upstream):
    answer = client.post("/v5/inference", json={"model": "fake/m",
                                                "args": {"messages": USER, "max_tokens": 3, "stream": True}})
    data = _data(answer)
    assert data[-1] == "[DONE]" and data.count("[DONE]") == 1  # the vendor's own [DONE] is not passed on
    chunks = [json.loads(d)["response"] for d in data[:-1]]
    assert all(c["choices"] for c in chunks)  # the usage-only chunk was the gateway's
    assert _chats(upstream)[0]["body"]["stream_options"] == {"include_usage": True}
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert (row["streamed"], row["estimated"], row["completion_tokens"]) == (True, False, 3)


def test_a_stream_shows_the_usage_chunk_when_the_client_asked(client, upstream):
    answer = client.post("/v5/inference", json={"model": "fake/m", "args": {
        "messages": USER, "max_tokens": 2, "stream": True, "stream_options": {"include_usage": True}}})
    chunks = [json.loads(d)["response"] for d in _data(answer)[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2


def test_a_vendor_4xx_to_the_payload_comes_back_quoting_it_unbilled(client, database):
    answer = client.post("/v5/inference", json={"model": "fake/m", "args": {"messages": [], "max_tokens": 2}})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "vendor_rejected" and "messages must be a non-empty list" in error["message"]
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert not row["prompt_tokens"] and not row["completion_tokens"]


@pytest.fixture(scope="module")
def legacy(upstream, database):
    """A gateway whose OpenAI-protocol vendor `legacy` serves /v5/inference from its legacy
    /completions (`inference_path`), where the fake's faults are."""
    env = gateway_env(upstream.url, database.url, GATEWAY_VENDOR_LEGACY_PROTOCOL="openai",
                      GATEWAY_VENDOR_LEGACY_BASE_URL=f"{upstream.url}/v1", GATEWAY_VENDOR_LEGACY_SERVER="openai",
                      GATEWAY_VENDOR_LEGACY_API_KEY=UPSTREAM_SECRET,
                      GATEWAY_VENDOR_LEGACY_INFERENCE_PATH="/completions",
                      GATEWAY_VENDOR_LEGACY_RETRIES="0", GATEWAY_VENDOR_LEGACY_FIRST_BYTE="1",
                      GATEWAY_VENDOR_LEGACY_IDLE="1", GATEWAY_VENDOR_RETRYING_INFERENCE_PATH="/completions",
                      # An Anthropic vendor in the chain: never tried for an OpenAI body (nobody answers there).
                      GATEWAY_VENDOR_ELSEWHERE_PROTOCOL="anthropic", GATEWAY_VENDOR_ELSEWHERE_BASE_URL=UNREACHABLE_URL,
                      GATEWAY_VENDOR_ELSEWHERE_API_KEY="sk-ant-unused",
                      GATEWAY_FALLBACKS="legacy/fail-503=elsewhere/claude,legacy/backup")
    with GatewayProcess(env) as process, httpx.Client(base_url=process.url, headers={"x-api-key": database.key},
                                                      timeout=30, verify=SHARED_TLS) as c:
        yield c


def test_inference_path_sends_the_body_there(legacy, upstream):
    answer = legacy.post("/v5/inference", json={"model": "legacy/m", "args": {"prompt": "hi", "max_tokens": 2}})
    assert answer.status_code == 200 and answer.json()["response"]["object"] == "text_completion"
    assert [r["path"] for r in upstream.requests] == ["/v1/completions"]


@pytest.mark.parametrize(("model", "status"), [("fail-500", 502), ("garbage", 502), ("truncated", 502)])
def test_vendor_faults_are_502_and_never_billed(legacy, database, model, status):
    answer = legacy.post("/v5/inference", json={"model": f"legacy/{model}", "args": {"prompt": "hi", "max_tokens": 2}})
    assert answer.status_code == status, answer.text
    assert UPSTREAM_SECRET not in answer.text
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert not row["prompt_tokens"] and not row["completion_tokens"]


def test_a_silent_vendor_is_a_504(legacy, database):
    answer = legacy.post("/v5/inference", json={"model": "legacy/stall",
                                                "args": {"prompt": "hi", "max_tokens": 2, "stream": True}})
    assert answer.status_code == 504
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert not row["completion_tokens"]


def test_no_usage_is_counted_and_flagged_estimated(legacy, database):
    answer = legacy.post("/v5/inference", json={"model": "legacy/no-usage", "args": {"prompt": "hi", "max_tokens": 3}})
    assert answer.status_code == 200 and answer.headers["x-gateway-usage-estimated"] == "true"
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert row["estimated"] is True and row["completion_tokens"] > 0


def test_the_clients_timeout_bounds_the_call(legacy):
    answer = legacy.post("/v5/inference", json={"model": "legacy/slow-1500", "inference_configuration": {
        "timeout_seconds": 1}, "args": {"prompt": "hi", "max_tokens": 1}})
    assert answer.status_code == 504 and "timeout_seconds" in answer.json()["error"]["message"]


def test_a_cut_stream_ends_with_an_error_event(legacy):
    answer = legacy.post("/v5/inference", json={"model": "legacy/cut-stream",
                                                "args": {"prompt": "hi", "max_tokens": 5, "stream": True}})
    data = _data(answer)
    assert data[-1] == "[DONE]" and "error" in json.loads(data[-2])


def test_counted_with_its_operation_and_reported_by_endpoint_as_the_ledger_has_it(client, gateway, database):
    model = "fake/native-counted"
    answers = [client.post("/v5/inference", json={"model": model, "args": {"messages": USER, "max_tokens": k}})
               for k in (1, 2)]
    assert [a.status_code for a in answers] == [200, 200]
    rows = [ledger_row(database.url, a.headers["x-request-id"]) for a in answers]
    assert [r["completion_tokens"] for r in rows] == [a.json()["response"]["usage"]["completion_tokens"]
                                                      for a in answers]
    wait_until(lambda: metric(scrape(gateway.url), "gateway_requests_total", vendor="fake", model=model,
                              status="200", stream="false", operation="generate_content") == 2,
               message="the native requests counted")
    report = client.get("/v5/usage", params={"group_by": "model,endpoint", "model": model})
    assert report.status_code == 200
    [line] = [line for line in report.json()["data"] if line["endpoint"] == "inference"]
    assert line["requests"] == 2
    assert line["prompt_tokens"] == sum(r["prompt_tokens"] for r in rows)
    assert line["completion_tokens"] == sum(r["completion_tokens"] for r in rows)


def test_a_fallback_is_a_vendor_of_the_same_protocol(legacy, upstream):
    answer = legacy.post("/v5/inference", json={"model": "legacy/fail-503", "args": {"prompt": "hi", "max_tokens": 1}})
    assert answer.status_code == 200, answer.text
    assert (answer.headers["x-gateway-model"], answer.headers["x-gateway-fallback-from"]) == (
        "legacy/backup", "legacy/fail-503")
    assert [r["body"]["model"] for r in upstream.requests] == ["fail-503", "backup"]


def test_num_retries_is_honoured_within_the_vendors(legacy, upstream):
    def ask(prompt: str, retries: int) -> httpx.Response:
        return legacy.post("/v5/inference", json={"model": "retrying/flaky-1", "inference_configuration": {
            "num_retries": retries}, "args": {"prompt": prompt, "max_tokens": 1}})

    assert ask("no retry", 0).status_code == 502
    assert ask("one retry", 1).status_code == 200
    assert [r["body"]["prompt"] for r in upstream.requests] == ["no retry", "one retry", "one retry"]
    assert ask("too many", 3).status_code == 400  # the vendor's retries are 2
