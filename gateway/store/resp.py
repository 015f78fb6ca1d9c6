"""A small Redis client for the limits' counters and the response cache: RESP2 over one pipelined
connection.

Why not redis-py: on the request path its asyncio client cost several times more CPU per command
than the same EVALSHA written and read on a bare asyncio connection (its pool, retry and parser
machinery; docs/performance.md#limits has the figures, and bench/limits.py measures the limiter
with this client). What the limits need is little: a handful of commands, scripts by their SHA, AUTH
and SELECT from the URL, TLS for rediss://. Commands from every request share the one connection,
their replies matched in order (Redis answers in order), so many requests cost few system calls;
a caller may keep most of a command's bytes from one call to the next (`Script`), and write one
without waiting for its reply (`send`, `Script.start`): then the reply is handed to a callback as
it is read, with no future and no callback scheduled on the loop in between.

    redis://[[user]:password@]host[:port][/db]     rediss://... the same over TLS

Over TLS (rediss://) Redis's certificate is always verified, its host name checked, against the
system's CAs (or SSL_CERT_FILE) or the CA file the URL's query names; the query may also name a
client certificate for a Redis that asks for one (`tls-auth-clients yes`). The names are
redis-py's, so one URL serves both:

    rediss://:password@redis.internal:6380/0?ssl_ca_certs=/etc/redis/ca.pem
        &ssl_certfile=/etc/redis/client.crt&ssl_keyfile=/etc/redis/client.key&ssl_cert_reqs=required

(`ssl_cert_reqs` may only be `required`: verification is not switched off.)
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

from gateway.core.errors import ConfigError
from gateway.core.tls import client_context

Reply = Any  # str | int | None | list[Reply] (strings decoded as UTF-8)
# What waits for a reply: a future (`execute`), or a callback (`send`) given the reply, a RedisError
# for an error reply, or RedisUnavailable when the connection was lost first.
Heard = Callable[[Any], None]
_Future = asyncio.Future


class RedisError(Exception):
    """Redis answered with an error."""


class RedisUnavailable(ConnectionError):
    """Redis could not be reached, or the connection broke before it answered."""


def bulk(value: Any) -> bytes:
    """One argument of a command as RESP writes it (a bulk string)."""
    if isinstance(value, bytes):
        data = value
    else:
        text = str(value)
        if text.isascii():  # digits, ids: as long in bytes as in characters (the cheaper way)
            return f"${len(text)}\r\n{text}\r\n".encode()
        data = text.encode()
    return b"$%d\r\n%b\r\n" % (len(data), data)


def pack(*args: Any) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(map(bulk, args))


class _Incomplete(Exception):
    pass


def _parse(buffer: bytearray, at: int) -> tuple[Reply, int]:
    """One reply from `buffer` at `at`, and where the next one starts (raises _Incomplete)."""
    end = buffer.find(b"\r\n", at)
    if end < 0:
        raise _Incomplete
    kind, line, at = buffer[at], buffer[at + 1:end], end + 2
    if kind == 36:  # $ (the counters' replies are mostly one bulk string)
        size = int(line)
        if size < 0:
            return None, at
        if len(buffer) < at + size + 2:
            raise _Incomplete
        return buffer[at:at + size].decode(), at + size + 2
    if kind == 43:  # +
        return line.decode(), at
    if kind == 45:  # -
        return RedisError(line.decode()), at
    if kind == 58:  # :
        return int(line), at
    if kind == 42:  # *
        count = int(line)
        if count < 0:
            return None, at
        items = []
        for _ in range(count):
            item, at = _parse(buffer, at)
            items.append(item)
        return items, at
    raise RedisUnavailable(f"not a Redis reply: {bytes(buffer[at - len(line) - 3:at])[:40]!r}")


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.waiting: deque[asyncio.Future[Reply] | Heard] = deque()
        self.buffer = bytearray()
        self.lost: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        at = 0
        while self.waiting and at < len(buffer):
            try:
                reply, at = _parse(buffer, at)
            except _Incomplete:
                break
            except RedisUnavailable as exc:
                self.transport.abort()
                self.connection_lost(exc)
                return
            waiter = self.waiting.popleft()
            if waiter.__class__ is not _Future:
                waiter(reply)
            elif not waiter.done():
                waiter.set_result(reply)
        del buffer[:at]

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = exc or RedisUnavailable("Redis closed the connection")
        while self.waiting:
            waiter = self.waiting.popleft()
            failure = RedisUnavailable(f"connection to Redis lost: {self.lost}")
            if waiter.__class__ is not _Future:
                waiter(failure)
            elif not waiter.done():
                waiter.set_exception(failure)



TLS_PARAMETERS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")


def tls_context(parts: SplitResult) -> ssl.SSLContext | None:
    """The TLS context of a rediss:// URL, from its query (the module's docstring); None for
    redis://. A ConfigError names the parameter that is wrong, never the URL (it may hold a password)."""
    query = parse_qs(parts.query, keep_blank_values=True)
    if unknown := sorted(set(query) - set(TLS_PARAMETERS)):
        raise ConfigError(f"redis_url: unknown parameter {', '.join(unknown)} (known: {', '.join(TLS_PARAMETERS)})")
    if parts.scheme != "rediss":
        if query:
            raise ConfigError(f"redis_url: {', '.join(sorted(query))} need rediss:// (Redis over TLS)")
        return None
    given = {name: values[-1] for name, values in query.items()}
    if given.get("ssl_cert_reqs", "required").lower() != "required":
        raise ConfigError("redis_url ssl_cert_reqs: only 'required' (the gateway always verifies Redis's certificate)")
    if given.get("ssl_keyfile") and not given.get("ssl_certfile"):
        raise ConfigError("redis_url: ssl_keyfile without ssl_certfile")
    return client_context(given.get("ssl_ca_certs"), given.get("ssl_certfile"), given.get("ssl_keyfile"),
                          names=("redis_url ssl_ca_certs", "redis_url ssl_certfile / ssl_keyfile"))


class Redis:
    def __init__(self, url: str, *, connect_timeout: float, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError(f"not a redis:// or rediss:// URL: {parts.scheme}://")
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 6379
        self._tls = tls_context(parts)
        self._user = unquote(parts.username) if parts.username else None
        self._password = unquote(parts.password) if parts.password else None
        self._db = int(parts.path.strip("/") or 0)
        self._connect_timeout, self._timeout = connect_timeout, timeout
        self._connection: _Connection | None = None
        self._connecting: asyncio.Future[_Connection] | None = None
        self._watchdog: asyncio.Future[None] | None = None
        self._scripts: list[Script] = []  # loaded on every connection before anything else is sent

    async def _open(self) -> _Connection:
        connection = self._connection
        if connection is not None and connection.lost is None:
            return connection
        if self._connecting is None:  # one connection attempt, however many callers wait for it
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, connection = await loop.create_connection(_Connection, self._host, self._port, ssl=self._tls)
                self._connection = connection
                if self._watchdog is None:
                    self._watchdog = asyncio.ensure_future(self._watch())
                # Written together, before any await lets another caller write on this connection
                # (`send` does not wait for connecting): they precede every command on it.
                setup = []
                if self._password is not None:
                    auth = (self._user, self._password) if self._user else (self._password,)
                    setup.append(self._send(connection, "AUTH", *auth))
                if self._db:
                    setup.append(self._send(connection, "SELECT", self._db))
                setup += self._loading(connection)
                for reply in setup:
                    self._check(await reply)
        except ssl.SSLCertVerificationError as exc:
            raise RedisUnavailable(f"cannot reach Redis at {self._host}:{self._port}: its TLS certificate could not "
                                   f"be verified ({exc.verify_message or exc})") from None
        except (OSError, TimeoutError) as exc:
            raise RedisUnavailable(f"cannot reach Redis at {self._host}:{self._port}: "
                                   f"{type(exc).__name__}: {exc}") from None
        return connection

    def _loading(self, connection: _Connection) -> list[asyncio.Future[Reply]]:
        """Every script, written to be loaded. A Redis that restarted has forgotten them; were one
        found missing only when called, the calls written meanwhile would overtake it (a settlement
        sent again after the next claim: a slot that is free, refused)."""
        return [self._send(connection, "SCRIPT", "LOAD", script.source) for script in self._scripts]

    async def _load(self, connection: _Connection) -> None:
        for load in self._loading(connection):
            self._check(await load)

    @staticmethod
    def _send(connection: _Connection, *args: Any) -> asyncio.Future[Reply]:
        return Redis._write(connection, pack(*args))

    @staticmethod
    def _write(connection: _Connection, command: bytes) -> asyncio.Future[Reply]:
        future: asyncio.Future[Reply] = connection.loop.create_future()
        connection.waiting.append(future)
        connection.transport.write(command)
        return future

    @staticmethod
    def _check(reply: Reply) -> Reply:
        if isinstance(reply, RedisError):
            raise reply
        return reply

    async def call(self, *args: Any) -> Reply:
        """One command's reply (RedisError for an error reply, RedisUnavailable when unreachable,
        or when it did not answer within `timeout`: see `_watch`)."""
        return await self.execute(pack(*args))

    async def execute(self, command: bytes) -> Reply:
        """`call` for a command already in RESP (`pack`, or pieces of it kept from earlier)."""
        connection = self._connection
        if connection is None or connection.lost is not None:
            connection = await self._open()
        return self._check(await self._write(connection, command))

    def send(self, command: bytes, heard: Heard) -> bool:
        """Writes `command` now, without waiting, when connected; `heard` is called with its raw
        reply (a RedisError is given, not raised) or with RedisUnavailable. False when not
        connected (`execute` connects), and `heard` is not called."""
        connection = self._connection
        if connection is None or connection.lost is not None:
            return False
        connection.transport.write(command)
        connection.waiting.append(heard)  # (after the write: a write that raised has no reply to wait for)
        return True

    @property
    def abandons_after(self) -> float:
        """The shortest wait after which a command may be given up on (`_watch` looks every half
        `timeout`): a command Redis runs later than this after it was sent may have no caller."""
        return self._timeout / 2

    async def _watch(self) -> None:
        """Aborts a connection whose oldest command has waited longer than `timeout`: replies come
        in order, so one that never came leaves the connection unusable. (One watchdog instead of a
        timer per command, which cost each command more than its own writing and reading.)"""
        oldest: asyncio.Future[Reply] | None = None
        while True:
            await asyncio.sleep(self._timeout / 2)
            connection = self._connection
            head = connection.waiting[0] if connection is not None and connection.waiting else None
            if head is not None and head is oldest:  # waiting since the last round, at least
                connection.connection_lost(RedisUnavailable(f"Redis did not answer within {self._timeout:g}s"))
                connection.transport.abort()
                head = None
            oldest = head

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._connection is not None and self._connection.transport is not None:
            self._connection.transport.close()
        self._connection = None


class Script:
    """A Lua script called by its SHA, loaded with its client's every connection (and again
    should Redis answer that it forgot it: SCRIPT FLUSH).

    Its callers write the whole command themselves, most of it kept from one call to the next:
    `head(count)` and then `count` bulk strings (`bulk`), the number of keys first."""

    def __init__(self, client: Redis, source: str) -> None:
        import hashlib

        self._client, self.source = client, source
        self.sha = hashlib.sha1(source.encode()).hexdigest()
        client._scripts.append(self)

    def head(self, count: int) -> bytes:
        return b"*%d\r\n" % (count + 2) + bulk("EVALSHA") + bulk(self.sha)

    async def __call__(self, command: bytes) -> Reply:
        return await self.ask(command)

    def ask(self, command: bytes) -> Awaitable[Reply]:
        """The call written now when connected, its reply awaited later: the caller does other
        work while Redis runs the script (a request is planned meanwhile). Not connected, it is
        written once awaiting it has connected."""
        client = self._client
        connection = client._connection  # (`execute`, inline: this is every request's call)
        if connection is None or connection.lost is not None:
            return self._connecting(command)
        return self._answer(client._write(connection, command), connection, command)

    async def _connecting(self, command: bytes) -> Reply:
        connection = await self._client._open()
        return await self._answer(self._client._write(connection, command), connection, command)

    async def _answer(self, written: asyncio.Future[Reply], connection: _Connection, command: bytes) -> Reply:
        reply = await written
        if reply.__class__ is not RedisError:
            return reply
        if not str(reply).startswith("NOSCRIPT"):
            raise reply
        await self._client._load(connection)  # (flushed while connected): every script, not this one alone
        return await self._client.execute(command)

    def start(self, command: bytes, done: Callable[[BaseException | None], None]) -> None:
        """The call written now, when connected (no task, no waiting); `done` is called once, with
        None when Redis has run it, or with what failed. A script Redis forgot is loaded and
        called again (in a task, as is a call that must connect first)."""

        def heard(reply: Reply) -> None:
            if reply.__class__ is RedisError and str(reply).startswith("NOSCRIPT"):
                _finish(asyncio.ensure_future(self(command)), done)  # loads it, then calls it again
            elif isinstance(reply, BaseException):
                done(reply)
            else:
                done(None)

        if not self._client.send(command, heard):  # not connected: connecting takes a task
            _finish(asyncio.ensure_future(self(command)), done)


def _finish(task: asyncio.Future[Reply], done: Callable[[BaseException | None], None]) -> None:
    def ended(task: asyncio.Future[Reply]) -> None:
        done(asyncio.CancelledError() if task.cancelled() else task.exception())

    task.add_done_callback(ended)
