"""What every HTTP vendor adapter shares: one pooled client per vendor, timeouts, bounded reads of
the vendor's answers, and the translation of a vendor's failure into the gateway's errors (who was
at fault, never a secret)."""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport

from gateway.core import observe
from gateway.core.config import Settings, VendorConfig
from gateway.core.errors import (
    MAX_RETRY_AFTER,
    BadRequest,
    GatewayError,
    NotFound,
    RateLimited,
    VendorCredentialsRejected,
    VendorFailed,
    VendorTimeout,
    clip,
)
from gateway.core.redaction import REDACTED
from gateway.vendors.sse_reader import Event, MalformedStream, read_events
from gateway.vendors.untrusted import MESSAGE_LIMIT

MAX_CONNECTIONS = 512
_JSON = {"content-type": "application/json"}
# Statuses worth another try: the vendor is busy or had a passing fault (529: Anthropic's "overloaded").
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
BACKOFF_BASE = 0.25  # seconds; attempt k waits up to BACKOFF_BASE * 2**k (full jitter)
BACKOFF_CAP = 8.0  # a longer Retry-After goes back to the client instead of being waited out here
# The largest non-streamed answer read from a vendor, in bytes. A completion, even with n choices
# and logprobs for thousands of tokens, is far smaller; a vendor sending more (or without end) is
# refused instead of filling the gateway's memory. (A stream is bounded per event: sse_reader.py.)
MAX_ANSWER_BYTES = 32 << 20
# How much of a vendor's error answer (a non-200) is read: its message is at the start.
MAX_ERROR_BYTES = 64 << 10

log = logging.getLogger("gateway.vendors")

# How `_send` waits between tries. A module attribute so that tests can record the delays the
# retry policy asks for instead of waiting them out (tests/test_faults.py).
sleep = asyncio.sleep

# How an adapter turns a vendor's non-200 answer (status, body, Retry-After) into our error.
ErrorMapper = Callable[[int, bytes, str | None], GatewayError]


class HttpAdapter:
    """What every adapter over HTTP shares: its vendor's configuration, one pooled client for the
    process's life (opened here, closed by `close()`), and nothing to wait for before serving."""

    def __init__(self, config: VendorConfig, settings: Settings, headers: Mapping[str, str]) -> None:
        self.name = config.name
        self._config = config
        self._headers = dict(headers)
        self._client = pooled_client(config, settings.http_transport, headers)

    def use_transport(self, transport: httpx.AsyncBaseTransport) -> None:
        """Send this vendor's requests through `transport` instead of the network, with the same
        headers, base URL and timeouts (in-process tests: httpx.MockTransport)."""
        self._client = pooled_client(self._config, transport, self._headers)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        await self._client.aclose()

    def not_ready(self) -> str | None:
        return None


def pooled_client(config: VendorConfig, transport: str | httpx.AsyncBaseTransport,
                  headers: Mapping[str, str]) -> httpx.AsyncClient:
    """One client per vendor for the process's life. `transport` picks the I/O under httpx's API:
    "aiohttp" (httpx-aiohttp: httpx's own pool is slow under concurrency, encode/httpx#3215; the
    README's Performance section has the figures), "httpx" (bench/ measures both), or a transport
    of the caller's."""
    t = config.timeouts
    limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS)
    if isinstance(transport, httpx.AsyncBaseTransport):
        io = transport
    elif transport == "aiohttp":
        io = AiohttpTransport(limits=limits)
    else:
        io = httpx.AsyncHTTPTransport(limits=limits)
    return httpx.AsyncClient(
        base_url=config.base_url,
        headers=dict(headers),
        # A non-streamed answer arrives whole at the end, so its only read limit is `total`;
        # streams are held to `first_byte` and `idle` by paced().
        timeout=httpx.Timeout(connect=t.connect, read=t.total, write=t.connect, pool=t.connect),
        transport=io,
    )


async def post_json(client: httpx.AsyncClient, config: VendorConfig, url: httpx.URL | str, payload: Any,
                    on_error: ErrorMapper) -> Any:
    """POST a JSON body and return the vendor's JSON answer; every failure is a GatewayError."""
    request = client.build_request("POST", url, content=orjson.dumps(payload), headers=_JSON)
    response = await _send(client, config, request, on_error, first_byte=None)
    try:
        body = await read_body(response, MAX_ANSWER_BYTES)
    except httpx.HTTPError as exc:
        raise transport_error(config, exc) from None
    except TooLarge:
        raise VendorFailed(f"vendor '{config.name}' sent an answer larger than {MAX_ANSWER_BYTES} bytes",
                           vendor=config.name) from None
    finally:
        await response.aclose()
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise VendorFailed(f"vendor '{config.name}' sent a malformed answer: not JSON (at byte {exc.pos})",
                           vendor=config.name) from None


class TooLarge(Exception):
    """A vendor's answer is longer than the gateway reads."""


async def read_body(response: httpx.Response, limit: int, *, truncate: bool = False) -> bytes:
    """The body of `response`, at most `limit` bytes (decoded): longer is TooLarge, or with
    `truncate` its first `limit` bytes. A declared Content-Length over the limit is refused unread."""
    declared = response.headers.get("content-length", "")
    if not truncate and declared.isdigit() and int(declared) > limit:
        raise TooLarge()
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            if truncate:
                return bytes(body[:limit])
            raise TooLarge()
    return bytes(body)


async def sse_events(client: httpx.AsyncClient, config: VendorConfig, url: httpx.URL | str, payload: Any,
                     on_error: ErrorMapper) -> AsyncIterator[Event]:
    """POST a JSON body and yield the server-sent events of the answer, held to the vendor's
    timeouts (`paced`); every failure is a GatewayError. The connection closes with the generator."""
    timeouts = config.timeouts
    request = client.build_request("POST", url, content=orjson.dumps(payload), headers=_JSON)
    response = await _send(client, config, request, on_error, first_byte=timeouts.first_byte)
    try:
        body_chunks = paced(response.aiter_bytes(), timeouts.first_byte, timeouts.idle, timeouts.total)
        async for event in read_events(body_chunks):
            yield event
    except (httpx.HTTPError, TimeoutError) as exc:
        raise transport_error(config, exc) from None
    except MalformedStream as exc:
        raise VendorFailed(f"vendor '{config.name}' sent a malformed stream: {exc}", vendor=config.name) from None
    finally:
        await response.aclose()


async def _send(client: httpx.AsyncClient, config: VendorConfig, request: httpx.Request, on_error: ErrorMapper, *,
                first_byte: float | None) -> httpx.Response:
    """Send `request` and return the vendor's 200 response with its body still to be read (the
    caller closes it), or raise the gateway error its failure means. `first_byte` bounds the wait
    for the response head (a stream's; a non-streamed head comes with the whole answer).

    Connection failures and RETRY_STATUSES are retried up to `config.retries` times with
    exponential backoff and full jitter, honouring Retry-After. This happens before anything
    went to the client (a stream's headers wait for its first chunk), so a retry is invisible
    to it. Timeouts are not retried: the time is already spent.

    Apart from that budget, a request is sent once more at once when its connection dropped
    before any answer: an HTTP/1.1 server may close a kept-alive connection just as the pool
    hands it out again (llama.cpp's server does it after every streamed answer although it
    announced keep-alive; a few requests in a hundred under concurrency failed). The vendor
    closed the connection without answering, so it did not serve the request.
    """
    attempts = config.retries + 1
    attempt = 0
    resent_after_drop = False
    observer = observe.current()
    while True:
        retry_after: float | None = None
        span = observer.vendor_request(config.name, request.method, request.url, attempt + resent_after_drop)
        try:
            async with asyncio.timeout(first_byte):
                response = await client.send(request, stream=True)
        except (httpx.HTTPError, TimeoutError) as exc:
            span.failed(exc)
            span.end()
            if connection_dropped(exc) and not resent_after_drop:
                resent_after_drop = True
                observer.vendor_retry(config.name, "connection_dropped")
                await asyncio.sleep(0)  # lets the pool see the other connections the vendor closed
                continue
            error = transport_error(config, exc)
            retryable = not is_timeout(exc)
            reason = "connection"
        except BaseException as exc:  # cancelled: the client left
            span.failed(exc)
            span.end()
            raise
        else:
            span.set({"http.response.status_code": response.status_code})
            if response.status_code == 200:
                span.end()
                return response
            try:
                body = await read_body(response, MAX_ERROR_BYTES, truncate=True)
            except httpx.HTTPError:
                body = b""
            finally:
                await response.aclose()
            header = response.headers.get("retry-after")
            error = on_error(response.status_code, body, header)
            span.failed(error)
            span.end()
            retryable = response.status_code in RETRY_STATUSES
            retry_after = retry_after_seconds(header)
            reason = str(response.status_code)
        attempt += 1
        if not retryable or attempt == attempts or (retry_after or 0) > BACKOFF_CAP:
            raise error
        delay = retry_after if retry_after is not None else random.uniform(0, BACKOFF_BASE * 2 ** (attempt - 1))
        log.info("vendor %s: %s; retry %d/%d in %.2fs", config.name, error.message, attempt, config.retries, delay)
        observer.vendor_retry(config.name, reason)
        await sleep(delay)


def error_message(body: bytes) -> str:
    """The human part of a vendor's error body. OpenAI (`{"error": {"message"}}`), Anthropic
    (`{"type": "error", "error": {"type", "message"}}`) and Gemini (`{"error": {"code", "message",
    "status"}}`) all put it in `error.message`; some compatible servers (vLLM) at the top. A body
    that is not JSON is its text. Not yet clipped or redacted: `vendor_error` does both."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode(errors="replace")
    return payload_message(payload)


def payload_message(payload: Any) -> str:
    """The message of a vendor's error object; "" when it has none that is text (the object
    itself is never quoted: it is the vendor's payload, of any size)."""
    if not isinstance(payload, dict):
        return ""
    error = payload.get("error")
    for message in (error.get("message") if isinstance(error, dict) else error, payload.get("message"),
                    payload.get("detail")):
        if isinstance(message, str) and message.strip():
            return message
    return ""


def vendor_error(config: VendorConfig, status: int, message: str, retry_after: str | None = None) -> GatewayError:
    """A vendor's error answer, as the error the client gets: whose fault, and what to do."""
    name = config.name
    message = redact(config, message) or f"HTTP {status}"
    if status in (401, 403):
        # The client cannot fix the gateway's credentials; the vendor's text may quote the key.
        return VendorCredentialsRejected("vendor rejected the gateway's credentials", code="vendor_auth", vendor=name)
    if status == 404:
        return NotFound(f"vendor '{name}': {message}", code="vendor_not_found", vendor=name)
    if status == 429:
        return RateLimited(f"vendor '{name}' rate limit: {message}", code="vendor_rate_limited", vendor=name,
                           retry_after=retry_after_seconds(retry_after))
    if 400 <= status < 500:
        return BadRequest(f"vendor '{name}' rejected the request: {message}", code="vendor_rejected", vendor=name)
    return VendorFailed(f"vendor '{name}' failed (HTTP {status}): {message}", code="vendor_error", vendor=name,
                        retry_after=retry_after_seconds(retry_after))


def transport_error(config: VendorConfig, exc: BaseException) -> GatewayError:
    """A failure to talk to the vendor at all: 504 when it was slow, 502 when it broke."""
    if is_timeout(exc):
        return VendorTimeout(f"vendor '{config.name}' did not answer in time", code="vendor_timeout",
                             vendor=config.name)
    detail = redact(config, str(exc)) or type(exc).__name__
    return VendorFailed(f"cannot talk to vendor '{config.name}': {detail}", code="vendor_unreachable",
                        vendor=config.name)


def is_timeout(exc: BaseException) -> bool:
    # httpx-aiohttp maps every aiohttp connection error (even "connection refused" or a reset
    # mid-stream) to httpx.ConnectTimeout; only a timeout underneath is a timeout.
    if isinstance(exc, TimeoutError):
        return True
    if isinstance(exc, httpx.TimeoutException):
        cause = exc.__cause__
        return cause is None or isinstance(cause, TimeoutError)
    return False


def connection_dropped(exc: BaseException) -> bool:
    """Whether the connection closed under a request before any answer came: not a timeout, not
    a refused connection, and (asked of `send(..., stream=True)`) nothing of a response yet."""
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return True  # httpx's own transport
    # httpx-aiohttp maps these to httpx.ConnectTimeout; the aiohttp error underneath tells.
    cause = exc.__cause__
    return isinstance(cause, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)) and not isinstance(
        cause, aiohttp.ClientConnectorError)


def redact(config: VendorConfig, text: str) -> str:
    """A vendor's text for a message: the vendor's key scrubbed, then clipped to MESSAGE_LIMIT
    characters, on one line. Scrubbed before it is clipped, so a cut never leaves part of the key.
    (The error renderer scrubs every message again, for key-shaped strings of any origin.)"""
    secret = config.secret
    text = text[: MESSAGE_LIMIT + len(secret) + 1]  # a key that starts within the limit ends within this
    if secret:
        text = text.replace(secret, REDACTED)
    return " ".join(clip(text, MESSAGE_LIMIT).split())


async def paced(chunks: AsyncIterator[bytes], first_byte: float, idle: float, total: float) -> AsyncIterator[bytes]:
    """`chunks`, failing with TimeoutError when the first one takes longer than `first_byte`, a
    later one longer than `idle`, or all of them longer than `total` seconds.

    Each wait has its own asyncio.timeout that ends before the yield: a timeout spanning a yield
    of an async generator would cancel whatever the consumer is doing at that moment instead."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + total
    limit = first_byte
    while True:
        try:
            async with asyncio.timeout(min(limit, deadline - loop.time())):
                chunk = await anext(chunks)
        except StopAsyncIteration:
            return
        limit = idle
        yield chunk


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """A vendor's Retry-After (RFC 9110): seconds, or an HTTP-date (IMF-fixdate or an obsolete
    form) counted from `now`. A wait that is not finite or negative, or a header that is neither,
    is ignored (None); a date already past is 0; anything longer than MAX_RETRY_AFTER is that."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:  # "-0000": UTC, with no claim about the local zone
            when = when.replace(tzinfo=UTC)
        seconds = max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER)
