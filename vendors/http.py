"""What every HTTP vendor adapter shares: one pooled client per vendor, timeouts, and the
translation of a vendor's failure into the gateway's errors (who was at fault, never a secret)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from gateway.config import VendorConfig
from gateway.errors import (
    GatewayError,
    InvalidRequest,
    NotFound,
    RateLimited,
    VendorFailed,
    VendorTimeout,
)

MAX_CONNECTIONS = 512


def pooled_client(config: VendorConfig, transport: str, headers: Mapping[str, str]) -> httpx.AsyncClient:
    """One client per vendor for the process's life. `transport` picks the I/O under httpx's API:
    "aiohttp" (httpx-aiohttp; httpx's own pool is several times slower under concurrency,
    encode/httpx#3215) or "httpx". bench/ measures both."""
    t = config.timeouts
    limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS)
    io = AiohttpTransport(limits=limits) if transport == "aiohttp" else httpx.AsyncHTTPTransport(limits=limits)
    return httpx.AsyncClient(
        base_url=config.base_url,
        headers=dict(headers),
        # A non-streamed answer arrives whole at the end, so its only read limit is `total`;
        # streams are held to `first_byte` and `idle` by paced().
        timeout=httpx.Timeout(connect=t.connect, read=t.total, write=t.connect, pool=t.connect),
        transport=io,
    )


def vendor_error(config: VendorConfig, status: int, message: str, retry_after: str | None = None) -> GatewayError:
    """A vendor's error answer, as the error the client gets: whose fault, and what to do."""
    name = config.name
    message = redact(config, message) or f"HTTP {status}"
    if status in (401, 403):
        # The client cannot fix the gateway's credentials; the vendor's text may quote the key.
        return VendorFailed("vendor rejected the gateway's credentials", code="vendor_auth", vendor=name)
    if status == 404:
        return NotFound(f"vendor '{name}': {message}", code="vendor_not_found", vendor=name)
    if status == 429:
        return RateLimited(f"vendor '{name}' rate limit: {message}", code="vendor_rate_limited", vendor=name,
                           retry_after=_seconds(retry_after))
    if 400 <= status < 500:
        return InvalidRequest(f"vendor '{name}' rejected the request: {message}", code="vendor_rejected", vendor=name)
    return VendorFailed(f"vendor '{name}' failed (HTTP {status}): {message}", code="vendor_error", vendor=name,
                        retry_after=_seconds(retry_after))


def transport_error(config: VendorConfig, exc: BaseException) -> GatewayError:
    """A failure to talk to the vendor at all: 504 when it was slow, 502 when it broke."""
    if is_timeout(exc):
        return VendorTimeout(f"vendor '{config.name}' did not answer in time", code="vendor_timeout", vendor=config.name)
    detail = redact(config, str(exc)) or type(exc).__name__
    return VendorFailed(f"cannot talk to vendor '{config.name}': {detail}", code="vendor_unreachable", vendor=config.name)


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
    return text.replace(config.api_key, "[redacted]") if config.api_key else text


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


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
