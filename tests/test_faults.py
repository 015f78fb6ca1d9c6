"""Vendor faults: retries before the first byte, timeouts, broken streams, unreachable vendors.
Each case asserts what the client sees (status, body, how a stream ends)."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.fakes.server import free_port
from tests.gateway_process import GatewayProcess
from tests.support import chunks_of, gateway_env, sse_events


def post(client: httpx.Client, model: str, stream: bool = False, **extra) -> httpx.Response:
    return client.post("/v5/completions", json={"model": model, "prompt": f"p-{time.monotonic_ns()}",
                                                "max_tokens": 3, "stream": stream, **extra})


@pytest.mark.parametrize("stream", [False, True])
def test_passing_vendor_faults_are_retried_invisibly(client, upstream, stream):
    r = post(client, "retrying/flaky-2", stream)
    assert r.status_code == 200, r.text
    assert len(upstream.requests) == 3  # two 503s, then the answer
    if stream:
        assert sse_events(r.text)[-1]["data"] == "[DONE]"


def test_retries_are_bounded_and_the_client_is_told_it_may_retry(client, upstream):
    r = post(client, "retrying/flaky-9")
    assert r.status_code == 502
    assert r.headers["x-should-retry"] == "true"
    assert len(upstream.requests) == 3  # 1 + retries (2)


def test_retry_after_is_honoured(client, upstream):
    started = time.monotonic()
    r = post(client, "retrying/limited-1")
    assert r.status_code == 200
    assert time.monotonic() - started >= 1.0
    assert len(upstream.requests) == 2


def test_a_long_retry_after_goes_back_to_the_client(client, upstream):
    r = post(client, "retrying/fail-429")
    assert r.status_code == 429 and r.headers["retry-after"] == "30"
    assert len(upstream.requests) == 1


def test_client_mistakes_at_the_vendor_are_not_retried(client, upstream):
    r = post(client, "retrying/fail-400")
    assert r.status_code == 400
    assert r.headers["x-should-retry"] == "false"
    assert len(upstream.requests) == 1


def test_stall_before_first_chunk_is_a_504(client):
    started = time.monotonic()
    r = post(client, "retrying/stall", stream=True)
    assert r.status_code == 504, r.text
    assert r.json()["error"]["type"] == "vendor_timeout"
    assert time.monotonic() - started < 5


def test_stall_after_first_chunk_is_an_error_event_then_done(client):
    r = post(client, "retrying/stall-later", stream=True)
    assert r.status_code == 200
    events = sse_events(r.text)
    assert events[-1] == {"event": "done", "data": "[DONE]"}
    assert json.loads(events[-2]["data"])["error"]["type"] == "vendor_timeout"


def test_non_streamed_answer_slower_than_total_is_a_504(client):
    started = time.monotonic()
    r = post(client, "retrying/slow-10000")
    assert r.status_code == 504
    assert 2.5 < time.monotonic() - started < 6


@pytest.mark.parametrize(("model", "stream"), [("reset", True), ("truncated", False)])
def test_broken_connections_are_vendor_errors(client, model, stream):
    r = post(client, f"fake/{model}", stream)
    if stream:
        events = sse_events(r.text)
        assert json.loads(events[-2]["data"])["error"]["type"] == "vendor_error"
        assert events[-1]["data"] == "[DONE]"
    else:
        assert r.status_code == 502
        assert r.json()["error"]["vendor"] == "fake"


def test_unreachable_vendor_is_a_502_after_retries(upstream, database):
    env = gateway_env(upstream.url, database.url, GATEWAY_VENDOR_DOWN_PROTOCOL="openai",
                      GATEWAY_VENDOR_DOWN_BASE_URL=f"http://127.0.0.1:{free_port()}/v1")
    headers = {"x-api-key": database.key}
    with GatewayProcess(env) as gateway, httpx.Client(base_url=gateway.url, headers=headers) as client:
        for stream in (False, True):
            r = post(client, "down/m", stream)
            assert r.status_code == 502, r.text
            assert r.json()["error"]["code"] == "vendor_unreachable"


@pytest.mark.parametrize("stream", [False, True])
def test_fallback_serves_when_the_model_fails(client, upstream, stream):
    r = post(client, "fake/fail-503", stream)
    assert r.status_code == 200, r.text
    assert r.headers["x-gateway-model"] == "fake/backup"
    assert r.headers["x-gateway-fallback-from"] == "fake/fail-503"
    if stream:
        assert {c["model"] for c in chunks_of(r.text)} == {"fake/backup"}
    else:
        assert r.json()["model"] == "fake/backup"
    assert [req["body"]["model"] for req in upstream.requests] == ["fail-503", "fail-400", "backup"]


def test_no_fallback_for_a_client_mistake_or_without_a_chain(client, upstream):
    r = post(client, "fake/fail-400")
    assert r.status_code == 400 and "x-gateway-fallback-from" not in r.headers
    r = post(client, "fake/fail-500")
    assert r.status_code == 502 and "x-gateway-fallback-from" not in r.headers
