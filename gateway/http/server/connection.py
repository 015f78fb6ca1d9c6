"""One client connection: uvicorn's httptools protocol with the limits a server facing hostile
clients needs and uvicorn lacks. Written against uvicorn 0.54.0 (`UVICORN_VERSION`); `check_hooks()`
fails at start-up if a private name relied on here is gone.

- A request's head (request line and headers) must arrive within `header_timeout` of the
  connection or of its first byte, and may be at most `max_header_bytes` (then 431). httptools has
  no limit of its own: it keeps an unfinished header in memory, growing it piece by piece.
- A connection with no request in progress is closed after `keep_alive_timeout`. uvicorn disarms
  its keep-alive timer on any byte received, so a client trickling the unread rest of a body after
  its answer (a 413, a /healthz) kept the connection forever; here only a new request counts.
- A malformed request or an oversized head gets our JSON error body (uvicorn writes plain text),
  after the response to an earlier pipelined request if one is being written, then a graceful
  close: we stop writing, discard what the client still sends, and drop the connection when the
  client closes it or after `keep_alive_timeout`. Closing at once, with its
  input unread, makes the kernel reset the connection, and the client may lose the answer.
- A response the app gave up on (a client that stopped reading) drops the connection at once: a
  plain close waits to flush bytes the client will never read, and shutdown would wait with it.
- A response's head goes out in one write with the first piece of its body (uvicorn writes the
  head alone): a small answer is one system call and one TCP segment, not two.
- A request whose body has arrived whole says so in its scope (`BODY_ARRIVED_KEY`), so that the
  body's reader arms no timeout for it: the usual request's body comes with its head.
- At shutdown, connections with no request in progress are closed without waiting for a client
  that does not read; a request still unanswered when the graceful period ends (uvicorn then
  cancels it) is answered 503 instead of uvicorn's bare 500.
"""

from __future__ import annotations

import asyncio
import functools
import http
import logging
from importlib.metadata import version
from typing import Any, ClassVar

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from gateway.core.config import Settings
from gateway.core.errors import BadRequest, GatewayError, HeaderFieldsTooLarge, ShuttingDown, clip
from gateway.http.server import hooks
from gateway.http.context import BODY_ARRIVED_KEY, DEPARTURE_KEY, Departure

log = logging.getLogger("gateway")

UVICORN_VERSION = "0.54.0"
_HOOKS: tuple[tuple[Any, str], ...] = (
    *((HttpToolsProtocol, name) for name in (
        "connection_made", "connection_lost", "on_message_begin", "on_url", "on_header", "on_headers_complete",
        "on_body", "on_message_complete", "on_response_complete", "shutdown", "timeout_keep_alive_handler",
        "_start_asgi_task", "_unset_keepalive_if_required", "_unsupported_upgrade_warning",
        "cycle", "parser", "flow", "transport", "server_state", "timeout_keep_alive")),
    *((RequestResponseCycle, name) for name in ("response_started", "response_complete", "keep_alive", "disconnected",
                                                "transport", "message_event", "scope", "more_body")),
)


class UvicornHookMissing(RuntimeError):
    """A uvicorn internal this module relies on is gone (an upgrade changed it)."""


def check_hooks() -> None:
    missing = hooks.missing(_HOOKS)
    if missing:
        raise UvicornHookMissing(f"uvicorn {version('uvicorn')} lacks what gateway/http/server/connection.py relies on "
                                 f"(written for {UVICORN_VERSION}): {', '.join(missing)}")
    if version("uvicorn") != UVICORN_VERSION:
        log.warning("uvicorn %s is installed; gateway/http/server/connection.py was written for %s",
                    version("uvicorn"), UVICORN_VERSION)


def protocol(settings: Settings) -> type[GatewayConnection]:
    """The connection class for uvicorn's `http` option, bound to `settings`' limits (uvicorn's own
    `timeout_keep_alive` must be `settings.keep_alive_timeout`: see http/server/server.py)."""
    check_hooks()
    return type("GatewayConnection", (GatewayConnection,), {
        "header_timeout": settings.header_timeout, "max_header_bytes": settings.max_header_bytes})


class _Refused(Exception):
    """Raised in a parser callback to stop parsing a request already answered with an error."""


class GatewayConnection(HttpToolsProtocol):
    header_timeout: ClassVar[float]
    max_header_bytes: ClassVar[int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        # Bytes of the request head being received (None while a body is): httptools tells where a
        # head ends but not at which byte of a received piece, so a piece carrying the end of one
        # request and the start of the next is split by what the parser reports of the first.
        self._head_bytes: int | None = 0
        self._reported = 0  # of the head under way: its URL and finished headers, as the parser handed them over
        self._heads = 0  # heads completed on this connection
        self._carried = 0  # bytes of the head under way that arrived before the piece being parsed
        self._used = 0  # bytes of that piece that went to bodies and to heads completed in it
        self._in_head = False  # a request has begun and its head is not complete
        self._rejected = False  # answered with an error: the client's further input is discarded
        self._pending: GatewayError | None = None  # that answer, while an earlier response is being written
        self._stopping = False  # the server is shutting down
        self._running: RequestResponseCycle | None = None  # the request whose app runs (or ran last)

    # -- connection ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        # uvicorn tells only the newest request, which may be a pipelined one still queued behind
        # the request being answered: that one is told here (its writes stop, a stream's watcher
        # wakes, a non-streamed request's vendor call is cancelled).
        running = self._running
        if running is not None and not running.response_complete:
            running.disconnected = True
            running.message_event.set()
            running.scope["extensions"][DEPARTURE_KEY].client_left()
        self._disarm_head_timer()
        self._unset_keepalive_if_required()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # Unlike uvicorn's, receiving data does not disarm the keep-alive timer (on_message_begin does).
        if self._rejected:
            return
        if self._head_bytes is not None and self._head_bytes + len(data) > self.max_header_bytes:
            room = self.max_header_bytes - self._head_bytes
            heads = self._heads
            self._feed(data[:room])  # the head may still end within the limit
            if self._rejected:
                return
            if self._heads == heads:
                return self._reject(self._head_too_large())
            data = data[room:]
        self._feed(data)
        if not self._rejected and (self._head_bytes or 0) > self.max_header_bytes:
            self._reject(self._head_too_large())

    def _feed(self, data: bytes) -> None:
        """Parse `data`; then `_head_bytes` counts what has arrived of the head under way, if any."""
        if not data:
            return
        carried, heads = self._head_bytes, self._heads
        self._carried, self._used = carried or 0, 0
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._reject(BadRequest(f"malformed HTTP request: {clip(str(exc))}", code="invalid_http_request"))
        except httptools.HttpParserUpgrade:
            self._unsupported_upgrade_warning()  # no WebSockets here (http/server/server.py)
        if self._head_bytes is None:
            return
        if carried is not None and self._heads == heads:
            self._head_bytes = carried + len(data)  # the whole piece belongs to the head under way
        else:  # the head began inside the piece, after what the parser used for bodies and earlier heads
            self._head_bytes = max(len(data) - self._used, 0)

    def _head_too_large(self) -> HeaderFieldsTooLarge:
        return HeaderFieldsTooLarge(f"the request head (request line and headers) exceeds {self.max_header_bytes} "
                                    "bytes", code="headers_too_large")

    def shutdown(self) -> None:
        self._stopping = True
        if self.cycle is None or self.cycle.response_complete:
            self._close()  # no request in progress: nothing to wait for
        else:
            self.cycle.keep_alive = False

    def timeout_keep_alive_handler(self) -> None:
        self._close()

    def _close(self) -> None:
        """Close now; a client that has not read what we sent gets no more time to (abort)."""
        if self.transport.get_write_buffer_size():
            self.transport.abort()
        elif not self.transport.is_closing():
            self.transport.close()

    # -- parser callbacks ------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._unset_keepalive_if_required()  # the connection is in use again
        self._in_head = True
        super().on_message_begin()
        if self._head_timer is None:  # the first request's head counts from the connection
            self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        self._reported += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._reported += len(name) + len(value) + 4  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm_head_timer()
        size = len(self.parser.get_method()) + self._reported + 14  # "METHOD URL HTTP/1.1\r\n", headers, "\r\n"
        if size > self.max_header_bytes:  # it began and ended inside one piece, after another request
            self._reject(self._head_too_large())
            raise _Refused  # stops the parser before the request starts
        self._used += size - self._carried
        self._carried = 0
        self._head_bytes, self._reported, self._in_head = None, 0, False
        self._heads += 1
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._used += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._head_bytes = 0  # what follows is the next request's head
        super().on_message_complete()
        if not self.cycle.more_body:
            # Its body is here whole: reading it cannot wait, so it needs no timer (http/server/validation.py).
            self.cycle.scope.setdefault("extensions", {})[BODY_ARRIVED_KEY] = True

    def on_response_complete(self) -> None:
        super().on_response_complete()  # arms the keep-alive timer, unless a pipelined request starts
        if self._pending is not None and self.cycle.response_complete:
            error, self._pending = self._pending, None
            self._answer(error)
        elif self._in_head:  # the next request's head is under way: the head timer governs
            self._unset_keepalive_if_required()

    # -- the app ---------------------------------------------------------------------------
    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        cycle.transport = _HeadWithBody(self.transport, self.loop)  # type: ignore[assignment]
        cycle.scope.setdefault("extensions", {})[DEPARTURE_KEY] = Departure()
        self._running = cycle
        super()._start_asgi_task(cycle, functools.partial(self._run_app, cycle, app))

    async def _run_app(self, cycle: RequestResponseCycle, app: Any, scope: Any, receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        except asyncio.CancelledError:
            if not self._stopping:
                raise
            # The graceful period is over and uvicorn cancelled what is left. A started event stream
            # has ended itself (http/event_stream.py); a request still waiting gets a 503.
            asyncio.current_task().uncancel()
            if not cycle.response_started:
                await _send_error(send, ShuttingDown(
                    "the gateway is shutting down and could not answer in time; retry",
                    code="shutting_down", retry_after=1))
        finally:
            if cycle.response_started and not cycle.response_complete and not cycle.disconnected:
                self.transport.abort()  # it cannot be completed: do not wait to flush it

    # -- answers the server writes itself ----------------------------------------------------
    def _reject(self, error: GatewayError) -> None:
        """Answer `error` and close gracefully (see the module's docstring); once."""
        if self._rejected:
            return
        self._rejected = True
        self._disarm_head_timer()
        log.info("rejected a request from %s: %s", self.client, error.message)
        cycle = self.cycle
        if (cycle is not None and cycle is self._running and cycle.more_body and not cycle.response_started):
            # The body under way is what is malformed (a chunk's size line): its request cannot be
            # answered otherwise, so it ends here, as if its client had left, and the error goes out
            # now rather than after the app waited `body_timeout` for the rest (a 408).
            cycle.disconnected = True
            cycle.message_event.set()
            cycle.scope["extensions"][DEPARTURE_KEY].client_left()
        elif cycle is not None and not cycle.response_complete:
            self._pending = error  # a response is being written: this one follows it (on_response_complete)
            return
        self._answer(error)

    def _answer(self, error: GatewayError) -> None:
        self._unset_keepalive_if_required()
        if self.transport.is_closing():
            return
        status, headers, body = _rendered(error)
        head = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n".encode()]
        head += [name + b": " + value + b"\r\n" for name, value in [*self.server_state.default_headers, *headers]]
        self.transport.write(b"".join([*head, b"connection: close\r\n\r\n", body]))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.resume_reading()
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.transport.abort)

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.header_timeout, self._close)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None


class _HeadWithBody:
    """The connection's transport as one response's cycle uses it (uvicorn's cycle calls `write`,
    `close` and `is_closing`). Its first write, the response head, is held back and goes out with
    the next, the body's first piece. A head with no body written in the same turn of the event
    loop goes out alone at the end of that turn, so nothing waits for a body that comes later."""

    __slots__ = ("_transport", "_loop", "_head")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._head: bytes | None = None  # b"" once the head has gone out

    def write(self, data: bytes) -> None:
        head = self._head
        if head is None:
            self._head = data
            self._loop.call_soon(self._flush)
        elif head:
            self._head = b""
            self._transport.write(head + data)
        else:
            self._transport.write(data)

    def _flush(self) -> None:
        if self._head:
            head, self._head = self._head, b""
            if not self._transport.is_closing():
                self._transport.write(head)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


def _rendered(error: GatewayError) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    body = orjson.dumps(error.body())
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(name.encode(), value.encode()) for name, value in error.headers().items()]
    return error.status, headers, body


async def _send_error(send: Any, error: GatewayError) -> None:
    status, headers, body = _rendered(error)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
