"""A request body's reader (http/server/validation.py) arms its timeout only for a body still on its way:
one that arrived with its head (the usual request) is read at once, without a timer; one that
comes in pieces is read under the timeout, and answered when its rest comes. (A body that never
comes is a 408: tests/integration/test_process_limits.py.)"""

from __future__ import annotations

import contextlib
import socket

import orjson

from gateway import services
from gateway.http.observe import observability
from gateway.http.server import validation
from tests.support.environments import gateway_env
from tests.support.fakes.server import free_port
from tests.support.gateway_process import ROOT
from tests.support.processes import served_in_process, wait_until


class Timers:
    """asyncio.timeout as the reader uses it, counted."""

    def __init__(self, timeout) -> None:
        self._timeout = timeout
        self.armed = 0

    def __call__(self, delay):
        self.armed += 1
        return self._timeout(delay)


def head(key: str, length: int) -> bytes:
    return (f"POST /v5/completions HTTP/1.1\r\nhost: gateway\r\nx-api-key: {key}\r\ncontent-type: application/json\r\n"
            f"content-length: {length}\r\n\r\n").encode()


def answer_of(sock: socket.socket) -> bytes:
    received = b""
    while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
        piece = sock.recv(65536)
        if not piece:
            break
        received += piece
    return received


def test_a_body_that_came_with_its_head_is_read_without_a_timer_and_one_in_pieces_with_it(
        upstream, database, monkeypatch):
    timers = Timers(validation.timeout)
    monkeypatch.setattr(validation, "timeout", timers)
    settings = services.load_settings(gateway_env(upstream.url, database.url, GATEWAY_PORT=str(free_port())))
    observability.uninstall()
    body = orjson.dumps({"model": "fake/pieces", "prompt": "in pieces", "max_tokens": 2})
    try:
        with served_in_process(services.create_app(settings), settings) as url, contextlib.closing(
                socket.create_connection(("127.0.0.1", settings.port))) as sock:
            sock.sendall(head(database.key, len(body)) + body)
            assert answer_of(sock).startswith(b"HTTP/1.1 200") and timers.armed == 0
            sock.sendall(head(database.key, len(body)) + body[:10])
            wait_until(lambda: timers.armed == 1, message="the reader waits for the rest under its timeout")
            sock.sendall(body[10:])
            assert answer_of(sock).startswith(b"HTTP/1.1 200") and timers.armed == 1
    finally:
        observability.uninstall()


def test_a_model_not_written_vendor_name_is_told_in_words_not_as_its_pattern():
    spec = orjson.loads((ROOT / "openapi.json").read_bytes())
    schema = spec["components"]["schemas"]["AdminPriceUpdate"]
    found = validation.problems(validation.SchemaValidators().get(schema), {"model": "gpt-4o", "input": 1, "output": 2})
    assert [(p["loc"], p["type"]) for p in found] == [(["body", "model"], "string_pattern_mismatch")]
    assert found[0]["msg"] == ("'gpt-4o' is not written vendor/name: a vendor, a slash and that vendor's name for the "
                               "model (e.g. openai/gpt-4o)")
