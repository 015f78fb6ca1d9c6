"""Per-process limits and misbehaving clients: nothing is queued without bound, nothing is pinned
forever, and a client that leaves stops the vendor call."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from gateway.http.event_stream import EventStreamResponse
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import wait_until


@pytest.fixture(scope="module")
def tight(upstream, database):
    env = gateway_env(upstream.url, database.url, GATEWAY_MAX_CONCURRENT="2", GATEWAY_MAX_VENDOR_CALLS="4",
                      GATEWAY_BODY_TIMEOUT="1", GATEWAY_HEADER_TIMEOUT="1",
                      # the fake vendor again, as a server that takes one prompt per call
                      GATEWAY_VENDOR_SINGLE_PROTOCOL="openai", GATEWAY_VENDOR_SINGLE_SERVER="openai", GATEWAY_VENDOR_SINGLE_BASE_URL=f"{upstream.url}/v1",
                      GATEWAY_VENDOR_SINGLE_LACKS="prompt,n")
    with GatewayProcess(env) as gateway:
        yield gateway


def test_requests_beyond_the_in_flight_limit_get_503_with_retry_after(tight, database):
    body = {"model": "fake/stall-later", "prompt": "x", "stream": True}
    with httpx.Client(base_url=tight.url, headers={"x-api-key": database.key}, timeout=10, verify=SHARED_TLS) as client:
        with client.stream("POST", "/v5/completions", json=body) as first, \
                client.stream("POST", "/v5/completions", json=body) as second:
            assert first.status_code == second.status_code == 200
            r = client.post("/v5/completions", json={"model": "fake/m", "prompt": "x"})
            assert r.status_code == 503
            assert r.headers["retry-after"] == "1" and r.headers["x-should-retry"] == "true"
            assert r.json()["error"]["code"] == "gateway_overloaded"
        # Both streams were closed by the client: their places are free again.
        def admitted() -> httpx.Response | None:
            r = client.post("/v5/completions", json={"model": "fake/m", "prompt": "x"})
            return r if r.status_code != 503 else None

        assert wait_until(admitted, message="a place to free up").status_code == 200


def test_the_vendor_call_limit_is_configurable(tight, upstream, database):
    body = {"model": "single/m", "prompt": ["a", "b"], "n": 2, "max_tokens": 1}
    r = httpx.post(f"{tight.url}/v5/completions", headers={"x-api-key": database.key}, json=body, verify=SHARED_TLS)
    assert r.status_code == 200 and len(upstream.requests) == 4  # 2 prompts x n=2, one call each
    r = httpx.post(f"{tight.url}/v5/completions", headers={"x-api-key": database.key},
                   json={**body, "prompt": ["a", "b", "c"]}, verify=SHARED_TLS)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "too_many_vendor_calls" and "limit of 4" in r.json()["error"]["message"]
    assert len(upstream.requests) == 4


def test_a_body_that_never_arrives_is_a_408(tight, database):
    with socket.create_connection(("127.0.0.1", tight.port), timeout=30) as s:
        s.sendall(b"POST /v5/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"x-api-key: " + database.key.encode() + b"\r\ncontent-length: 100\r\n\r\n{\"model\"")
        answer = s.recv(4096)  # the socket's timeout is a safety net: the gateway answers first
    assert answer.startswith(b"HTTP/1.1 408")


def test_headers_that_never_finish_are_dropped(tight):
    with socket.create_connection(("127.0.0.1", tight.port), timeout=30) as s:
        s.sendall(b"POST /v5/completions HTTP/1.1\r\nhost: x\r\n")
        assert s.recv(4096) == b""  # closed by the gateway, without an answer


def test_client_leaving_mid_stream_stops_the_vendor_call(client, upstream):
    body = {"model": "fake/slow-200", "prompt": "x", "max_tokens": 16, "stream": True}
    with client.stream("POST", "/v5/completions", json=body) as r:
        next(r.iter_bytes())
        assert upstream.open_streams == 1
    (vendor_stream,) = upstream.streams
    wait_until(lambda: vendor_stream.ended, message="the vendor stream to end")
    # The gateway hung up on the vendor before the vendor had sent everything.
    assert vendor_stream.client_left and vendor_stream.sent < vendor_stream.events


class EndlessEvents:
    """An event source that never ends, noting when it is closed."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()

    def __aiter__(self):
        return self._events()

    async def _events(self):
        while True:
            yield b"data: {}\n\n"

    async def aclose(self) -> None:
        self.closed.set()


class StuckClient:
    """An ASGI client that takes a few events, then stops reading: its socket is full, and every
    further send waits (until cancelled). It never disconnects."""

    def __init__(self) -> None:
        self.sends = 0
        self.stuck = asyncio.Event()  # a send is waiting
        self.cancelled_sends = 0

    async def send(self, message) -> None:
        self.sends += 1
        if self.sends > 3:
            self.stuck.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled_sends += 1
                raise

    async def receive(self):
        await asyncio.Event().wait()


def test_a_client_that_stops_reading_is_dropped_after_send_timeout():
    async def scenario() -> tuple[EndlessEvents, StuckClient]:
        source, client = EndlessEvents(), StuckClient()
        response = EventStreamResponse(source, headers={}, send_timeout=0.2)
        # The wait_for is a safety net: without the send timeout the response would never end.
        await asyncio.wait_for(response({"type": "http"}, client.receive, client.send), timeout=30)
        return source, client

    source, client = asyncio.run(scenario())
    assert client.stuck.is_set() and client.cancelled_sends == 1  # the stuck send was given up
    assert client.sends == 4  # nothing more was sent to it
    assert source.closed.is_set()  # and the events behind it were released


def test_a_client_that_is_slow_to_read_is_kept_within_send_timeout():
    async def scenario() -> tuple[EndlessEvents, bool]:
        source, client = EndlessEvents(), StuckClient()
        response = EventStreamResponse(source, headers={}, send_timeout=3600)
        task = asyncio.create_task(response({"type": "http"}, client.receive, client.send))
        await client.stuck.wait()
        for _ in range(100):  # let everything that is ready to run, run
            await asyncio.sleep(0)
        kept = not task.done() and not source.closed.is_set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return source, kept

    source, kept = asyncio.run(scenario())
    assert kept  # still waiting for the client, whose time is not up
    assert source.closed.is_set()  # released once the response ended after all
