"""Vendor faults: retries before the first byte, timeouts, broken streams, unreachable vendors.
Each case asserts what the client sees (status, body, how a stream ends). The retry policy's
waits are checked in-process, with the wait recorded instead of spent."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from gateway.core.completion import CompletionCall
from gateway.core.config import VendorConfig
from gateway.core.errors import BadRequest, GatewayError, RateLimited
from gateway.vendors.transport import http as vendor_http
from gateway.vendors import vendor_errors
from gateway.vendors.transport.http1 import Http1Client
from tests.support.bodies import chunks_of, sse_events
from tests.support.environments import gateway_env


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


def test_a_short_retry_after_is_retried_invisibly(client, upstream):
    r = post(client, "retrying/limited-1-0")  # one 429 with Retry-After: 0
    assert r.status_code == 200, r.text
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


def test_stall_before_first_chunk_is_a_504(client, upstream):
    r = post(client, "retrying/stall", stream=True)
    assert r.status_code == 504, r.text
    assert r.json()["error"]["type"] == "vendor_timeout"
    assert len(upstream.requests) == 1  # a timeout is not retried: the time is already spent


def test_stall_after_first_chunk_is_an_error_event_then_done(client):
    r = post(client, "retrying/stall-later", stream=True)
    assert r.status_code == 200
    events = sse_events(r.text)
    assert events[-1] == {"event": "done", "data": "[DONE]"}
    assert json.loads(events[-2]["data"])["error"]["type"] == "vendor_timeout"


def test_non_streamed_answer_slower_than_total_is_a_504(client):
    r = post(client, "retrying/slow-10000")
    assert r.status_code == 504
    assert r.json()["error"]["type"] == "vendor_timeout"


def test_a_non_streamed_answer_is_held_to_first_byte_too(client, upstream):
    """A whole answer arrives at its end, and `first_byte` bounds that wait as it bounds a
    stream's: a vendor that accepts calls and never answers must not hold a request until
    `total`. One that comes after first_byte, well within total, is a 504 after one try."""
    env = gateway_env("", "")
    first_byte, total = (float(env[f"GATEWAY_VENDOR_RETRYING_{name}"]) for name in ("FIRST_BYTE", "TOTAL"))
    r = post(client, f"retrying/slow-{round((first_byte + total) / 2 * 1000)}")
    assert r.status_code == 504 and r.json()["error"]["code"] == "vendor_timeout", r.text
    assert len(upstream.requests) == 1  # one deployment: a timeout is retried only elsewhere


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


@pytest.mark.parametrize("stream", [False, True])
def test_unreachable_vendor_is_a_502_after_retries(client, stream):
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


# -- the retry policy, in-process: real HTTP to the fake vendor, the waits recorded ----------------
def call_with_retries(upstream, model: str, monkeypatch) -> tuple[object, list[float]]:
    """POST a completion for `model` to the fake through the vendor layer's retrying send, with
    the default retry budget. Returns the answer (or the GatewayError raised) and the delays the
    policy asked to wait, none of which is spent."""
    waits: list[float] = []

    async def record(delay: float) -> None:
        waits.append(delay)

    monkeypatch.setattr(vendor_http, "sleep", record)
    config = VendorConfig(name="retrying", protocol="openai", base_url=f"{upstream.url}/v1")

    def on_error(status: int, body: bytes, retry_after: str | None) -> GatewayError:
        return vendor_errors.vendor_error(config, status, vendor_errors.error_message(body), retry_after)

    async def call() -> object:
        deployments = vendor_http.Deployments(config, Http1Client, lambda key: {})
        try:
            payload = {"model": model, "prompt": f"p-{time.monotonic_ns()}", "max_tokens": 1}
            return await deployments.post_json("/completions", payload, on_error, CompletionCall(model, []))
        except GatewayError as exc:
            return exc
        finally:
            await deployments.aclose()

    return asyncio.run(call()), waits


def test_retry_after_is_waited_exactly(upstream, monkeypatch):
    answer, waits = call_with_retries(upstream, "limited-1", monkeypatch)  # one 429 with Retry-After: 1
    assert answer["choices"][0]["text"] == " w0"
    assert waits == [1.0]
    assert len(upstream.requests) == 2


def test_without_retry_after_the_backoff_is_exponential_with_full_jitter(upstream, monkeypatch):
    answer, waits = call_with_retries(upstream, "flaky-2", monkeypatch)  # two 503s, then the answer
    assert answer["choices"][0]["text"] == " w0"
    assert len(waits) == 2 and len(upstream.requests) == 3
    for k, wait in enumerate(waits):
        assert 0 <= wait <= vendor_http.BACKOFF_BASE * 2**k


def test_a_retry_after_beyond_the_cap_goes_back_at_once(upstream, monkeypatch):
    error, waits = call_with_retries(upstream, "fail-429", monkeypatch)  # Retry-After: 30
    assert 30 > vendor_http.BACKOFF_CAP
    assert isinstance(error, RateLimited) and error.retry_after == 30
    assert waits == [] and len(upstream.requests) == 1


def test_when_the_retries_run_out_the_vendors_retry_after_goes_to_the_client(upstream, monkeypatch):
    error, waits = call_with_retries(upstream, "limited-9", monkeypatch)  # 429, Retry-After: 1, every time
    assert isinstance(error, RateLimited) and error.retry_after == 1
    assert waits == [1.0, 1.0] and len(upstream.requests) == 3  # 1 + retries (2)


def test_a_client_mistake_is_not_retried(upstream, monkeypatch):
    error, waits = call_with_retries(upstream, "fail-400", monkeypatch)
    assert isinstance(error, BadRequest)
    assert waits == [] and len(upstream.requests) == 1
