"""Per-process limits and misbehaving clients: nothing is queued without bound, nothing is pinned
forever, and a client that leaves stops the vendor call."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest

from gateway.http.event_stream import EventStreamResponse
from tests.gateway_process import GatewayProcess
from tests.support import gateway_env


@pytest.fixture(scope="module")
def tight(upstream, database):
    env = gateway_env(upstream.url, database.url, GATEWAY_MAX_CONCURRENT="2", GATEWAY_MAX_VENDOR_CALLS="4",
                      GATEWAY_BODY_TIMEOUT="1", GATEWAY_HEADER_TIMEOUT="1",
                      # the fake vendor again, as a server that takes one prompt per call
                      GATEWAY_VENDOR_SINGLE_PROTOCOL="openai", GATEWAY_VENDOR_SINGLE_BASE_URL=f"{upstream.url}/v1",
                      GATEWAY_VENDOR_SINGLE_LACKS="prompt,n")
    with GatewayProcess(env) as gateway:
        yield gateway


def test_requests_beyond_the_in_flight_limit_get_503_with_retry_after(tight, database):
    body = {"model": "fake/stall-later", "prompt": "x", "stream": True}
    with httpx.Client(base_url=tight.url, headers={"x-api-key": database.key}, timeout=10) as client:
        with client.stream("POST", "/v5/completions", json=body) as first, \
                client.stream("POST", "/v5/completions", json=body) as second:
            assert first.status_code == second.status_code == 200
            r = client.post("/v5/completions", json={"model": "fake/m", "prompt": "x"})
            assert r.status_code == 503
            assert r.headers["retry-after"] == "1" and r.headers["x-should-retry"] == "true"
            assert r.json()["error"]["code"] == "gateway_overloaded"
        # Both streams were closed by the client: their places are free again.
        deadline = time.monotonic() + 3
        while (r := client.post("/v5/completions", json={"model": "fake/m", "prompt": "x"})).status_code == 503:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert r.status_code == 200


def test_the_vendor_call_limit_is_configurable(tight, upstream, database):
    body = {"model": "single/m", "prompt": ["a", "b"], "n": 2, "max_tokens": 1}
    r = httpx.post(f"{tight.url}/v5/completions", headers={"x-api-key": database.key}, json=body)
    assert r.status_code == 200 and len(upstream.requests) == 4  # 2 prompts x n=2, one call each
    r = httpx.post(f"{tight.url}/v5/completions", headers={"x-api-key": database.key},
                   json={**body, "prompt": ["a", "b", "c"]})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "too_many_vendor_calls" and "limit of 4" in r.json()["error"]["message"]
    assert len(upstream.requests) == 4


def test_a_body_that_never_arrives_is_a_408(tight, database):
    with socket.create_connection(("127.0.0.1", tight.port), timeout=5) as s:
        s.sendall(b"POST /v5/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"x-api-key: " + database.key.encode() + b"\r\ncontent-length: 100\r\n\r\n{\"model\"")
        started = time.monotonic()
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408")
    assert 0.9 < time.monotonic() - started < 3


def test_headers_that_never_finish_are_dropped(tight):
    with socket.create_connection(("127.0.0.1", tight.port), timeout=5) as s:
        s.sendall(b"POST /v5/completions HTTP/1.1\r\nhost: x\r\n")
        started = time.monotonic()
        assert s.recv(4096) == b""  # closed by the gateway
    assert 0.9 < time.monotonic() - started < 3


def test_client_leaving_mid_stream_stops_the_vendor_call(client, upstream):
    body = {"model": "fake/slow-200", "prompt": "x", "max_tokens": 16, "stream": True}
    with client.stream("POST", "/v5/completions", json=body) as r:
        next(r.iter_bytes())
        assert upstream.open_streams == 1
    deadline = time.monotonic() + 2
    while upstream.open_streams:
        assert time.monotonic() < deadline, "the vendor stream is still open"
        time.sleep(0.02)


def test_a_client_that_stops_reading_is_dropped_after_send_timeout():
    closed = asyncio.Event()

    class Source:
        def __aiter__(self):
            return self._events()

        async def _events(self):
            while True:
                yield b"data: {}\n\n"

        async def aclose(self):
            closed.set()

    async def scenario():
        response = EventStreamResponse(Source(), headers={}, send_timeout=0.2)
        sent = 0

        async def send(message):
            nonlocal sent
            sent += 1
            if sent > 3:
                await asyncio.Event().wait()  # the client's socket is full and stays full

        async def receive():
            await asyncio.Event().wait()

        started = time.monotonic()
        await asyncio.wait_for(response({"type": "http"}, receive, send), timeout=5)
        return time.monotonic() - started

    elapsed = asyncio.run(scenario())
    assert closed.is_set()
    assert 0.2 <= elapsed < 1
