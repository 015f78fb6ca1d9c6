"""`Http1Client`: a deployment's connections through the gateway's own HTTP/1.1 client, the only
one (vendors/transport/client.py has the interface).

Why our own: a vendor call is one POST of a JSON body, and its answer a status, a few headers and a
body read as it comes. A general client library spends much of a request's CPU on its session,
request, payload, writer, timer and tracing objects (aiohttp's did: docs/performance.md), and a
stream's pieces go through its stream reader. The parsing is llhttp here as there (httptools,
which uvicorn parses requests with already).

What it keeps of a library's duties:
- a pool of kept-alive connections, at most MAX_CONNECTIONS open; a connection is used again only
  once its answer was read to the end and the vendor did not ask to close it;
- TLS with the deployment's context (proxies.Network: the vendor's `ca_file`, or transport.tls()),
  the host name checked;
- a proxy when the deployment has one (vendors/transport/proxies.py): a CONNECT tunnel to an https vendor
  (TLS inside it, to the vendor's host name), absolute-form requests to an http one; pooled
  connections are kept-alive tunnels, used again like direct ones;
- the connect timeout, `first_byte` for the answer's head (a non-streamed answer's whole wait), and
  `total` for every piece of the body;
- a connection closed before any byte of its answer is `dropped` (vendors/transport/http.py sends once more:
  the vendor did not serve it); a broken answer is a TransportError; neither quotes a key;
- what a vendor sends is bounded: its head at MAX_HEAD_BYTES, the bytes read but not yet taken at
  MAX_BUFFERED (reading pauses; vendors/transport/http.py bounds a body's total); bytes nobody asked for
  close the connection;
- nothing a library would add unasked: no Accept-Encoding (a vendor that compresses anyway sends
  what the adapters then refuse as not JSON), no redirects, no cookies, no proxy that neither the
  settings nor the environment named.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

import httptools

from gateway.core.vendor_config import Timeouts
from gateway.vendors.transport.proxies import Network, open_tunnel, reach
from gateway.vendors.transport.client import MAX_CONNECTIONS, Answer, TransportError, connect_failure, described

MAX_HEAD_BYTES = 64 << 10  # an answer's status line and headers
MAX_HEADERS = 256  # header lines of an answer (repeats of one name are joined: their count bounds the copying)
MAX_BUFFERED = 256 << 10  # read from the vendor, not yet taken: reading pauses above it
RESUME_BELOW = 64 << 10
# Seconds a connection waits in the pool to be used again (aiohttp's default): past it, it is closed
# rather than sent on, as a vendor with a short keep-alive may be closing it just then.
KEEP_IDLE = 15.0


class Http1Client:
    def __init__(self, headers: Mapping[str, str], timeouts: Timeouts, network: Network = Network()) -> None:
        fields = {**headers, "content-type": "application/json"}
        self._network = network
        proxy = network.proxy
        # What a request to an http vendor through the proxy adds (an https one's goes in its tunnel).
        self._to_proxy = f"proxy-authorization: {proxy.authorization}\r\n" if proxy and proxy.authorization else ""
        if any(c in text for item in fields.items() for text in item for c in "\r\n"):
            raise ValueError("a vendor header holds a line break")
        self._fields = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
        self._timeouts = timeouts
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._targets: dict[str, tuple[tuple[str, str, int], bytes]] = {}  # url -> origin, request head
        self._slots: asyncio.Semaphore | None = None  # made with the first request (in its loop)
        self._closed = False

    async def send(self, url: str, body: bytes) -> Answer:
        origin, head = self._targets.get(url) or self._target(url)
        return await self._request(origin, head + b"%d\r\n\r\n" % len(body) + body)

    async def get(self, url: str) -> Answer:
        (scheme, host, port), head = self._target(url, method="GET", cached=False)
        return await self._request((scheme, host, port), head + b"0\r\n\r\n")

    async def _request(self, origin: tuple[str, str, int], data: bytes) -> Answer:
        idle = self._idle.get(origin)
        connection = None
        if idle:
            now = time.monotonic()
            while idle:
                candidate = idle.pop()
                if candidate.usable() and now - candidate.idle_since < KEEP_IDLE:
                    connection = candidate
                    break
                candidate.close()
        if connection is None:
            connection = await self._connect(origin)
        connection.request(data)
        try:
            await connection.head(self._timeouts.first_byte)
        except BaseException:
            connection.close()
            raise
        if connection.status == 407 and origin[0] == "http" and self._network.proxy is not None:
            connection.close()  # the proxy's answer, not the vendor's
            raise TransportError("the proxy refused the request (HTTP 407: its credentials are missing or wrong)",
                                 where=f"proxy {self._network.proxy.shown}")
        return _Http1Answer(connection, self, origin)

    def _target(self, url: str, method: str = "POST", cached: bool = True) -> tuple[tuple[str, str, int], bytes]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportError("its URL is not http(s)", where=f"{parts.scheme}://{parts.hostname or ''}")
        default = 443 if parts.scheme == "https" else 80
        port = parts.port or default
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        authority = shown if port == default else f"{shown}:{port}"
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        extra = ""
        if self._network.proxy is not None and parts.scheme == "http":
            path, extra = f"http://{authority}{path}", self._to_proxy  # absolute form, for the proxy
        head = f"{method} {path} HTTP/1.1\r\nhost: {authority}\r\n{extra}{self._fields}content-length: ".encode(
            "latin-1")
        found = (parts.scheme, host, port), head
        if cached and len(self._targets) < 64:  # a deployment's few paths; others are parsed each time
            self._targets[url] = found
        return found

    async def _connect(self, origin: tuple[str, str, int]) -> _Connection:
        slots = self._slots = self._slots or asyncio.Semaphore(MAX_CONNECTIONS)
        scheme, host, port = origin
        network = self._network
        proxy = network.proxy
        connection = None
        where = f"{host}:{port}" if proxy is None else f"{host}:{port} through proxy {proxy.shown}"
        try:
            # The wait for a free slot counts in the connect timeout, as in aiohttp's pool; so do
            # the proxy's tunnel and the TLS handshake.
            async with asyncio.timeout(self._timeouts.connect):
                await slots.acquire()
                connection = _Connection(slots, f"{host}:{port}")
                loop = asyncio.get_running_loop()
                if proxy is None:
                    await loop.create_connection(lambda: connection, host, port,
                                                 ssl=network.tls if scheme == "https" else None,
                                                 server_hostname=host if scheme == "https" else None)
                elif scheme == "http":
                    await reach(loop, lambda: connection, proxy)
                else:
                    tunnel = await open_tunnel(loop, proxy, host, port)
                    try:
                        transport = await loop.start_tls(tunnel, connection, network.tls, server_hostname=host)
                    except BaseException:
                        tunnel.close()
                        raise
                    connection.connection_made(transport)  # (start_tls does not call it)
        except BaseException as exc:
            if connection is not None:
                connection.close()
            if isinstance(exc, OSError) and not isinstance(exc, TimeoutError):
                raise TransportError(connect_failure(exc), where=f"{where} ({described(exc)})") from None
            raise
        return connection

    def _keep(self, origin: tuple[str, str, int], connection: _Connection) -> None:
        if self._closed:
            connection.close()
        else:
            connection.idle_since = time.monotonic()
            self._idle.setdefault(origin, []).append(connection)

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()


class _Http1Answer:
    __slots__ = ("status", "_connection", "_client", "_origin", "_done")

    def __init__(self, connection: _Connection, client: Http1Client, origin: tuple[str, str, int]) -> None:
        self.status = connection.status
        self._connection = connection
        self._client = client
        self._origin = origin
        self._done = False

    def header(self, name: str) -> str | None:
        return self._connection.headers.get(name.lower())

    async def read(self) -> bytes:
        return await self._connection.piece(self._client._timeouts.total)

    async def aclose(self) -> None:
        if self._done:
            return
        self._done = True
        connection = self._connection
        if connection.reusable():
            self._client._keep(self._origin, connection)
        else:
            connection.close()  # unread or not to be kept: closing is how the vendor hears we left


class _Connection(asyncio.Protocol):
    """One connection to a vendor and the answer being read on it."""

    def __init__(self, slots: asyncio.Semaphore, address: str) -> None:
        self._slots = slots
        self._address = address
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._lost = False
        self._error: Exception | None = None
        self._asked = False  # a request was sent whose answer has not ended
        self._received = False  # any byte of that answer
        self._head_bytes = 0
        self._header_lines = 0
        self._head_done = False
        self._ended = False
        self._until_close = False  # a body without length: it ends when the vendor closes
        self._keep_alive = False  # the vendor will take another request on it
        self._pieces: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self.status = 0
        self.headers: dict[str, str] = {}
        self.idle_since = 0.0  # when it went back to the pool

    # -- the client's side --------------------------------------------------------------------------
    def usable(self) -> bool:
        return not self._lost and self._transport is not None and not self._transport.is_closing()

    def reusable(self) -> bool:
        return self._ended and self._keep_alive and not self._pieces and self.usable()

    def request(self, data: bytes) -> None:
        self._asked, self._received, self._head_done, self._ended = True, False, False, False
        self._head_bytes = self._header_lines = 0
        self._until_close = self._keep_alive = False
        self.status, self.headers = 0, {}
        assert self._transport is not None
        self._transport.write(data)

    async def head(self, timeout: float) -> None:
        while not self._head_done:
            self._raise_if_broken()
            await self._wait(timeout)

    async def piece(self, timeout: float) -> bytes:
        while True:
            if self._pieces:  # all that came since the last read, as one piece (a stream's events at once)
                pieces = self._pieces
                piece = pieces.popleft() if len(pieces) == 1 else b"".join(pieces)
                pieces.clear()
                self._buffered = 0
                if self._paused and self._buffered < RESUME_BELOW and self._transport is not None:
                    self._paused = False
                    self._transport.resume_reading()
                return piece
            if self._ended:
                return b""
            self._raise_if_broken()
            await self._wait(timeout)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        else:
            self.abandon()

    def abandon(self) -> None:
        """Never connected: give its slot back."""
        if not self._lost:
            self._lost = True
            self._slots.release()

    def _raise_if_broken(self) -> None:
        if self._error is not None:
            raise self._error
        if self._lost:
            if not self._received:
                raise TransportError("the connection closed before any answer", where=self._address, dropped=True)
            raise TransportError("the connection closed before the answer's end", where=self._address)

    async def _wait(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the network's side -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self._asked or self._ended:
            self._fail(TransportError("it sent bytes nobody asked for", where=self._address))
            return
        self._received = True
        try:
            self._parser.feed_data(data)
        except Exception as exc:  # a callback's refusal (already the error), or llhttp's
            self._fail(self._error or TransportError("it sent an answer that is not HTTP/1.1",
                                                     where=f"{self._address} ({described(exc)})"))

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._slots.release()
        if self._until_close and self._head_done and not self._ended:
            self._ended = True  # a body without length ends with the connection
            self._asked = False
        self._wake()

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        if self._transport is not None:
            self._transport.close()
        self._wake()

    # httptools' callbacks, in the order of an answer (one that raises makes feed_data raise)
    def on_message_begin(self) -> None:
        if self._ended:  # a second answer behind the one asked for, in the same read
            self._refuse("it sent bytes nobody asked for")

    def on_status(self, status: bytes) -> None:
        self._count(len(status))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value))
        self._header_lines += 1
        if self._header_lines > MAX_HEADERS:
            self._refuse(f"it sent an answer of more than {MAX_HEADERS} header lines")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            self._head_bytes, self._header_lines, self.headers = 0, 0, {}
            return
        self.status = status
        self._head_done = True
        self._keep_alive = self._parser.should_keep_alive()  # (after the answer's end, llhttp has forgotten)
        self._until_close = "content-length" not in self.headers and "chunked" not in self.headers.get(
            "transfer-encoding", "").lower()
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._pieces.append(body)
        self._buffered += len(body)
        if self._buffered > MAX_BUFFERED and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if not self._head_done:
            return  # the end of an interim answer
        self._ended = True
        self._asked = False
        self._wake()

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            self._refuse(f"it sent an answer head of more than {MAX_HEAD_BYTES} bytes")

    def _refuse(self, why: str) -> None:
        self._error = self._error or TransportError(why, where=self._address)
        raise self._error


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())
