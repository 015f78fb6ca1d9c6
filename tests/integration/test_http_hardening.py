"""Hostile and careless clients on the HTTP side, over real sockets to a real gateway process: deep
JSON, huge heads, malformed HTTP, connections left open, a missing Content-Type, what /readyz tells
strangers, echoed client values, and what SIGTERM does to requests it cannot finish."""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import signal
import sqlite3

import httpx
import pytest

from gateway.core.errors import ClientDisconnected
from gateway.http.server import connection
from gateway.http.context import DEPARTURE_KEY, Departure, HandlerRequest
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import assert_responsive, memory, wait_until
from tests.support.provision import empty_database, postgres_down, postgres_unavailable, provision
from tests.support.raw_http import SAFETY, Client, request

MAX_HEADER_BYTES = 64 << 10  # the default


@pytest.fixture(scope="module")
def strict(upstream, database):
    env = gateway_env(upstream.url, database.url, GATEWAY_HEADER_TIMEOUT="1", GATEWAY_KEEP_ALIVE_TIMEOUT="1",
                      GATEWAY_BODY_TIMEOUT="1")
    with GatewayProcess(env) as gateway:
        yield gateway


def sse_data(body: bytes) -> list[str]:
    return [line[len("data: "):] for line in body.decode().split("\n") if line.startswith("data: ")]


def ledger_outcome(database_url: str, request_id: str) -> str | None:
    with contextlib.closing(sqlite3.connect(database_url.removeprefix("sqlite:///"))) as db:
        row = db.execute("SELECT outcome FROM ledger WHERE request_id = ?", (request_id,)).fetchone()
    return row[0] if row else None


def completion_request(key: str, body: dict) -> bytes:
    return request("/v5/completions", "POST", {"content-type": "application/json", "x-api-key": key},
                   json.dumps(body).encode())


def test_every_uvicorn_internal_the_connection_relies_on_exists(monkeypatch):
    connection.check_hooks()
    monkeypatch.setattr(connection, "_HOOKS", ((connection.HttpToolsProtocol, "_no_such_hook"),))
    with pytest.raises(connection.UvicornHookMissing, match="HttpToolsProtocol._no_such_hook"):
        connection.check_hooks()


# -- D6: deep JSON -------------------------------------------------------------------------------
def nested(depth: int) -> bytes:
    """A completion body whose nesting, the body itself included, is `depth` levels deep."""
    return b'{"model": "fake/m", "prompt": "x", "x": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


@pytest.mark.parametrize("depth", [33, 254, 255, 256, 1023, 1024, 1025, 1026, 100_000])
def test_json_nested_beyond_the_limit_is_a_422_at_any_depth(strict, database, upstream, depth):
    r = httpx.post(f"{strict.url}/v5/completions", content=nested(depth),
                   headers={"x-api-key": database.key, "content-type": "application/json"}, verify=SHARED_TLS)
    assert r.status_code == 422, r.text
    [problem] = r.json()["detail"]
    assert problem["loc"] == ["body"] and problem["type"] == "json_invalid"
    assert "nested" in problem["msg"] or "depth limit" in problem["msg"]
    assert upstream.requests == []
    assert_responsive(strict)


def test_json_nested_up_to_the_limit_reaches_schema_validation(strict, database):
    r = httpx.post(f"{strict.url}/v5/completions", content=nested(32),
                   headers={"x-api-key": database.key, "content-type": "application/json"}, verify=SHARED_TLS)
    assert r.status_code == 422
    assert r.json()["detail"] == [{"loc": ["body", "x"], "msg": "Extra inputs are not permitted",
                                   "type": "extra_forbidden"}]


# -- D8: the size of a request's head ---------------------------------------------------------------
@pytest.mark.parametrize(
    "head",
    [
        request("/healthz", headers={"x-pad": "a" * MAX_HEADER_BYTES}),
        request("/healthz", headers={f"x-pad-{i}": "a" * 60 for i in range(MAX_HEADER_BYTES // 60)}),
        request("/healthz?" + "q" * MAX_HEADER_BYTES),
    ],
    ids=["one-header", "many-headers", "long-url"],
)
def test_a_head_over_the_limit_is_a_json_431_then_closed(strict, head):
    with Client(strict.port) as client:
        client.send(head)
        answer = client.answer()
        assert answer.status == 431
        assert answer.headers["content-type"] == "application/json" and answer.headers["connection"] == "close"
        assert answer.json()["error"]["code"] == "headers_too_large"
        assert answer.headers["x-should-retry"] == "false"
        assert client.closed_by_gateway() == b""
    assert_responsive(strict)


def test_a_head_within_the_limit_is_served(strict):
    with Client(strict.port) as client:
        client.send(request("/healthz", headers={"x-pad": "a" * (MAX_HEADER_BYTES - 1024)}))
        assert client.answer().status == 200


def test_a_pipelined_head_after_a_body_is_held_to_the_limit_too(strict, database):
    with Client(strict.port) as client:
        client.send(completion_request(database.key, {"model": "fake/m", "prompt": "x" * 200_000, "max_tokens": 1})
                     + request("/healthz", headers={"x-pad": "a" * MAX_HEADER_BYTES}))
        assert client.answer().status == 200
        assert client.answer().status == 431


def test_an_endless_head_is_refused_at_the_limit_and_not_kept(strict):
    """The attack: one header that never ends. It is answered once it passes the limit, and what
    follows is discarded rather than held in memory."""
    before = memory(strict.proc.pid)
    piece = b"a" * (1 << 16)
    with Client(strict.port) as client:
        client.send(b"GET /healthz HTTP/1.1\r\nhost: gateway\r\nx-pad: ")
        answered_after = None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for sent in range(0, 32 << 20, len(piece)):
                if answered_after is None and select.select([client.sock], [], [], 0)[0]:
                    answered_after = sent
                if sent == 8 * len(piece):
                    assert_responsive(strict)  # others are served while the flood goes on
                client.send(piece)
        answer = client.answer()
    assert answer.status == 431
    assert answered_after is not None  # the answer came while the head was still arriving
    assert memory(strict.proc.pid) - before < 16 << 20
    assert_responsive(strict)


# -- malformed HTTP ----------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [b"GARBAGE\r\n\r\n", b"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n",
                                 b"GET /healthz HTTP/1.1\r\ncontent-length: -1\r\n\r\n"])
def test_a_malformed_request_gets_a_json_400_then_the_connection_closes(strict, raw):
    with Client(strict.port) as client:
        client.send(raw)
        answer = client.answer()
        assert answer.status == 400 and answer.headers["content-type"] == "application/json"
        error = answer.json()["error"]
        assert error["code"] == "invalid_http_request" and error["message"].startswith("malformed HTTP request")
        assert client.closed_by_gateway() == b""


# -- D9: connections left open -----------------------------------------------------------------------
def test_an_idle_keep_alive_connection_is_closed(strict):
    with Client(strict.port) as client:
        client.send(request("/healthz"))
        assert client.answer().status == 200
        assert client.closed_by_gateway() == b""


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (request("/healthz", headers={"content-length": "100"}), 200),
        (None, 413),  # a body over the limit is refused before it is read
    ],
    ids=["healthz", "413"],
)
def test_an_answered_request_whose_declared_body_never_arrives_is_closed(strict, database, head, status):
    if head is None:
        head = request("/v5/completions", "POST", {"content-type": "application/json", "x-api-key": database.key,
                                                   "content-length": str(4 << 20)})
    with Client(strict.port) as client:
        client.send(head + b'{"model"')
        assert client.answer().status == status
        client.send(b":")  # a trickle of the body nobody reads kept the connection open indefinitely
        assert client.closed_by_gateway() == b""


# -- Content-Type -------------------------------------------------------------------------------------
def test_a_body_without_content_type_is_a_415(strict, database, upstream):
    r = httpx.post(f"{strict.url}/v5/completions", content=b'{"model": "fake/m", "prompt": "x"}',
                   headers={"x-api-key": database.key}, verify=SHARED_TLS)
    assert "content-type" not in r.request.headers
    assert r.status_code == 415 and r.headers["x-should-retry"] == "false"
    assert r.json()["error"]["code"] == "content_type_missing"
    assert upstream.requests == []


# -- /readyz --------------------------------------------------------------------------------------------
def test_readyz_shows_its_checks_only_to_a_caller_with_a_valid_key(strict, database):
    checks = {"fake": "ok", "retrying": "ok", "down": "ok", "database": "ok", "limits": "ok"}
    for headers in ({}, {"x-api-key": "sk-gw-not-a-key"}, {"authorization": "Bearer sk-gw-not-a-key"}):
        r = httpx.get(f"{strict.url}/readyz", headers=headers, verify=SHARED_TLS)
        assert (r.status_code, r.json()) == (200, {"status": "ok"})
    for headers in ({"x-api-key": database.key}, {"authorization": f"Bearer {database.key}"}):
        r = httpx.get(f"{strict.url}/readyz", headers=headers, verify=SHARED_TLS)
        assert (r.status_code, r.json()) == (200, {"status": "ok", "checks": checks})


def test_readyz_shows_its_checks_to_the_metrics_key_not_to_a_customers_key(upstream, database):
    operator = "operator-secret-0123456789"
    with GatewayProcess(gateway_env(upstream.url, database.url, GATEWAY_METRICS_KEY=operator)) as gateway:
        for headers in ({}, {"x-api-key": database.key}, {"authorization": f"Bearer {database.key}"}):
            r = httpx.get(f"{gateway.url}/readyz", headers=headers, verify=SHARED_TLS)
            assert (r.status_code, r.json()) == (200, {"status": "ok"})
        for headers in ({"x-api-key": operator}, {"authorization": f"Bearer {operator}"}):
            r = httpx.get(f"{gateway.url}/readyz", headers=headers, verify=SHARED_TLS)
            assert r.status_code == 200 and r.json()["checks"]["database"] == "ok"


def test_readyz_while_starting_says_only_that_without_a_key(tmp_path, database):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a model")
    env = {"GATEWAY_DATABASE_URL": database.url, "GATEWAY_VENDOR_LOCAL_MODEL_PATH": str(bogus)}
    with GatewayProcess(env, ready_path="/healthz") as gateway:
        def local_check() -> str:
            r = httpx.get(f"{gateway.url}/readyz", headers={"x-api-key": database.key}, verify=SHARED_TLS)
            return r.json()["checks"]["local"]

        wait_until(lambda: "loading" not in local_check(), SAFETY,
                   message="the bogus model's load ends")
        assert "cannot load model" in local_check()
        r = httpx.get(f"{gateway.url}/readyz", verify=SHARED_TLS)
        assert (r.status_code, r.json()) == (503, {"status": "starting"})


def test_readyz_during_a_database_outage_says_degraded_without_the_error(upstream):
    if reason := postgres_unavailable():
        pytest.skip(reason)
    with empty_database("postgresql") as url:
        db = provision(url)
        with GatewayProcess(gateway_env(upstream.url, db.url)) as gateway:
            keyed = {"x-api-key": db.key}
            body = {"model": "fake/m", "prompt": "x", "max_tokens": 1}
            post = lambda: httpx.post(f"{gateway.url}/v5/completions", json=body, headers=keyed,  # noqa: E731
                                      verify=SHARED_TLS)
            assert post().status_code == 200
            with postgres_down(db.url):
                # A row the ledger cannot write is what tells the gateway its database is away.
                assert post().status_code == 200
                wait_until(lambda: httpx.get(f"{gateway.url}/readyz", verify=SHARED_TLS).json()["status"] == "degraded",
                           SAFETY, message="degraded")
                for headers in ({}, {"x-api-key": db.multi_key}):  # the second key was never checked: it cannot be now
                    r = httpx.get(f"{gateway.url}/readyz", headers=headers, verify=SHARED_TLS)
                    assert (r.status_code, r.json()) == (200, {"status": "degraded"})
                r = httpx.get(f"{gateway.url}/readyz", headers=keyed, verify=SHARED_TLS)
                assert r.status_code == 200 and "database unavailable" in r.json()["checks"]["database"]


# -- echoed client values -------------------------------------------------------------------------------
def test_errors_repeat_only_the_start_of_a_long_client_value(strict, database):
    long = "q" * 60_000
    keyed = {"x-api-key": database.key}
    r = httpx.post(f"{strict.url}/v5/completions", json={"model": "fake/m", "prompt": "x"},
                   headers=keyed | {"x-selected-account-id": long}, verify=SHARED_TLS)
    assert r.status_code == 403
    assert f"'{'q' * 100}…'" in r.json()["error"]["message"] and len(r.json()["error"]["message"]) < 200

    r = httpx.post(f"{strict.url}/v5/completions", json={"model": f"fake/{long}", "prompt": "x", long: 1},
                   headers=keyed, verify=SHARED_TLS)
    assert r.status_code == 422
    assert len(r.content) < 2_000
    assert {("body", "q" * 100 + "…")} <= {tuple(p["loc"]) for p in r.json()["detail"]}

    r = httpx.post(f"{strict.url}/v5/completions", content=b"{}", headers=keyed | {"content-type": f"text/{long}"},
                   verify=SHARED_TLS)
    assert r.status_code == 415 and len(r.json()["error"]["message"]) < 200


# -- SIGTERM ------------------------------------------------------------------------------------------------
def test_sigterm_answers_what_it_cannot_finish_and_exits_0(upstream, database):
    """A request still waiting for its vendor when the graceful period ends gets a 503 it may retry
    elsewhere, and a stream that is still open ends with an error event and [DONE]."""
    env = gateway_env(upstream.url, database.url, GATEWAY_SHUTDOWN_TIMEOUT="1", GATEWAY_VENDOR_FAKE_IDLE="120")
    gateway = GatewayProcess(env).start()
    try:
        with Client(gateway.port) as waiting, Client(gateway.port) as streaming:
            waiting.send(completion_request(database.key, {"model": "fake/slow-600000", "prompt": "x"}))
            streaming.send(completion_request(database.key, {"model": "fake/stall-later", "prompt": "x",
                                                                "stream": True}))
            wait_until(lambda: len(upstream.requests) == 2 and upstream.open_streams == 1, SAFETY,
                       message="both reach the vendor")
            gateway.proc.send_signal(signal.SIGTERM)

            answer = waiting.answer()
            assert answer.status == 503 and answer.headers["x-should-retry"] == "true"
            assert answer.headers["retry-after"] == "1"
            assert answer.json()["error"]["code"] == "shutting_down"

            stream = streaming.answer()
            assert stream.status == 200
            *chunks, error, done = sse_data(stream.body)
            assert chunks and json.loads(error)["error"]["code"] == "shutting_down" and done == "[DONE]"
        assert gateway.proc.wait(SAFETY) == 0
    finally:
        gateway.stop()


def test_shutdown_does_not_wait_for_clients_that_stopped_reading(upstream, database):
    """A stream client dropped for not reading, and a client that never reads a finished answer,
    leave nothing for a graceful shutdown to wait for (its period here is far longer than SAFETY)."""
    # The vendor's first byte may take a while on a loaded machine (a 200-prompt answer): not this test's
    # subject, so its limit is generous.
    env = gateway_env(upstream.url, database.url, GATEWAY_SEND_TIMEOUT="1", GATEWAY_SHUTDOWN_TIMEOUT="600",
                      GATEWAY_KEEP_ALIVE_TIMEOUT="600", GATEWAY_VALIDATE_RESPONSES="0",
                      GATEWAY_VENDOR_FAKE_FIRST_BYTE=str(SAFETY))
    gateway = GatewayProcess(env).start()
    # Answers of several MiB: more than the socket buffers between the two ends hold.
    big = {"model": "fake/m", "prompt": ["y"] * 200, "logprobs": 5, "max_tokens": 256}
    try:
        with Client(gateway.port, receive_buffer=4096) as stream_reader, \
                Client(gateway.port, receive_buffer=4096) as answer_reader:
            stream_reader.send(completion_request(database.key, big | {"stream": True}))
            head = stream_reader.head()
            assert head.status == 200, head
            request_id = head.headers["x-request-id"]
            wait_until(lambda: ledger_outcome(database.url, request_id) == "client_disconnected", SAFETY,
                       message="the stream's client is dropped")
            answer_reader.send(completion_request(database.key, big))
            assert answer_reader.head().status == 200  # the body waits in the buffers between us
            gateway.proc.send_signal(signal.SIGTERM)
            assert gateway.proc.wait(SAFETY) == 0
    finally:
        gateway.stop()


class _Recorded:
    """A transport that keeps what was written to it, one entry per write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def test_a_response_head_goes_out_with_the_first_piece_of_its_body_in_one_write():
    async def main() -> list[list[bytes]]:
        loop = asyncio.get_running_loop()
        seen = []
        # Head and body in the same turn of the loop: one write; later pieces as they come.
        transport = _Recorded()
        cycle = connection._HeadWithBody(transport, loop)
        cycle.write(b"HTTP/1.1 200 OK\r\n\r\n")
        cycle.write(b"body")
        cycle.write(b"more")
        await asyncio.sleep(0)
        seen.append(transport.writes)
        # A head whose body does not come in the same turn goes out alone at the end of it.
        transport = _Recorded()
        cycle = connection._HeadWithBody(transport, loop)
        cycle.write(b"HTTP/1.1 200 OK\r\n\r\n")
        assert transport.writes == []
        await asyncio.sleep(0)
        seen.append(list(transport.writes))
        cycle.write(b"late body")
        seen.append(transport.writes)
        # Closing writes a head still held first.
        transport = _Recorded()
        cycle = connection._HeadWithBody(transport, loop)
        cycle.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        cycle.close()
        seen.append(transport.writes + [b"closed" if transport.closed else b"open"])
        return seen

    together, alone, then, closed = asyncio.run(main())
    assert together == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"more"]
    assert alone == [b"HTTP/1.1 200 OK\r\n\r\n"]
    assert then == [b"HTTP/1.1 200 OK\r\n\r\n", b"late body"]
    assert closed == [b"HTTP/1.1 204 No Content\r\n\r\n", b"closed"]


def test_a_handler_waiting_for_its_work_hears_at_once_that_its_client_left():
    async def main() -> list[str]:
        seen = []

        def request() -> tuple[HandlerRequest, Departure]:
            departure = Departure()
            return HandlerRequest({"extensions": {DEPARTURE_KEY: departure}}), departure

        async def vendor_call(blocked: asyncio.Event) -> str:
            try:
                blocked.set()
                await asyncio.Event().wait()  # never answers
            finally:
                seen.append("vendor call closed")
            return "answer"

        async def swallowing(blocked: asyncio.Event) -> str:
            blocked.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
            return "answer anyway"

        for work in (vendor_call, swallowing):
            handler_request, departure = request()
            blocked = asyncio.Event()
            waiting = asyncio.ensure_future(handler_request.unless_client_leaves(work(blocked)))
            await blocked.wait()
            departure.client_left()  # what the connection does when it is lost
            try:
                await waiting
            except ClientDisconnected:
                seen.append(f"{work.__name__}: ClientDisconnected, task cancelling={waiting.cancelling()}")
        # Left before the work began: the work never starts.
        handler_request, departure = request()
        departure.client_left()
        with contextlib.suppress(ClientDisconnected):
            await handler_request.unless_client_leaves(vendor_call(asyncio.Event()))
            seen.append("not raised")
        # Nobody left: the work's answer.
        handler_request, _ = request()

        async def quick() -> str:
            return "answer"
        seen.append(await handler_request.unless_client_leaves(quick()))
        return seen

    assert asyncio.run(main()) == [
        "vendor call closed", "vendor_call: ClientDisconnected, task cancelling=0",
        "swallowing: ClientDisconnected, task cancelling=0", "answer"]


def test_a_chunked_body_with_a_bad_size_line_is_a_400_at_once(strict, database):
    head = request("/v5/completions", "POST", {"content-type": "application/json", "x-api-key": database.key,
                                               "transfer-encoding": "chunked"})
    with Client(strict.port) as client:
        # The strict gateway's body_timeout is 1 s: a 408 would say the connection waited for the rest.
        client.send(head + b"5\r\n{\"mod\r\nzz-not-a-size\r\n")
        answer = client.answer()
        assert answer.status == 400 and answer.json()["error"]["code"] == "invalid_http_request"
        assert client.closed_by_gateway() == b""
    assert_responsive(strict)
