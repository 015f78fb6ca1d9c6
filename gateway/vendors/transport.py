"""The HTTP clients under the vendor adapters: one small interface, two libraries behind it.

`Client.send` posts a body and returns the vendor's `Answer` once its head has arrived; the body is
then read a piece at a time, as the network delivers it (`Answer.read`). What can go wrong is
either a `TimeoutError` or a `TransportError` (with `dropped` when the connection closed before
any answer came), whichever library is underneath, so vendors/http.py handles failures once.

- `AiohttpClient`, the default: aiohttp's pool, called directly. httpx's own pool is slow under
  concurrency (encode/httpx#3215), and httpx's API over aiohttp (httpx-aiohttp) costs a request
  and every piece of a stream several layers of Python the gateway has no use for.
- `HttpxClient` (vendors/transport_httpx.py, imported only when used): httpx's own pool
  (`GATEWAY_HTTP_TRANSPORT=httpx`, which bench/ compares), or any httpx transport of the caller's
  (in-process tests answer through httpx.MockTransport).
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Mapping
from typing import Protocol

import aiohttp
import certifi

from gateway.core.vendor_config import Timeouts

MAX_CONNECTIONS = 512  # per deployment


class TransportError(Exception):
    """The vendor could not be talked to (refused, reset, a broken body): the library's own
    description, which may quote the vendor's address but never a key. `dropped`: the connection
    closed under a request before any answer came (then the vendor did not serve it)."""

    def __init__(self, message: str, *, dropped: bool = False) -> None:
        super().__init__(message)
        self.dropped = dropped


class Answer(Protocol):
    status: int

    def header(self, name: str) -> str | None: ...

    async def read(self) -> bytes:
        """The next piece of the body, as it arrived (decoded); b"" at its end."""

    async def aclose(self) -> None:
        """Done with it: the connection goes back to the pool if the body was read to its end,
        else it is closed (which is how a vendor hears that its caller left)."""


class Client(Protocol):
    async def send(self, url: str, body: bytes) -> Answer:
        """POST a JSON `body` to `url` (absolute) and return the answer once its head came."""

    async def aclose(self) -> None: ...


@functools.cache
def tls() -> ssl.SSLContext:
    """The vendors' TLS context, one per process, for either client: certifi's roots, or those of
    SSL_CERT_FILE / SSL_CERT_DIR (as httpx chooses them)."""
    if cafile := os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=cafile)
    if capath := os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=capath)
    return ssl.create_default_context(cafile=certifi.where())


class AiohttpClient:
    """One deployment's connections, through aiohttp. The pool is made on the first request
    (aiohttp wants a running event loop)."""

    def __init__(self, headers: Mapping[str, str], timeouts: Timeouts) -> None:
        self._headers = {**headers, "content-type": "application/json"}
        # A non-streamed answer arrives whole at the end, so its only read limit is `total`;
        # streams are held to `first_byte` and `idle` by vendors/http.py.
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeouts.connect, sock_connect=timeouts.connect,
                                              sock_read=timeouts.total)
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, limit_per_host=0, ssl=tls())
        # No cookie jar: a vendor's cookies set on one client's call must not ride on the next
        # client's (and filtering a jar is work on every request).
        self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout,
                                              cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def send(self, url: str, body: bytes) -> Answer:
        session = self._session or self._open()
        try:
            response = await session.post(url, data=body, headers=self._headers, allow_redirects=False)
        except TimeoutError:
            raise
        except aiohttp.ClientConnectorError as exc:  # refused, unresolvable: not a dropped connection
            raise TransportError(described(exc)) from None
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise TransportError(described(exc), dropped=True) from None
        except aiohttp.ClientError as exc:
            raise TransportError(described(exc)) from None
        return _AiohttpAnswer(response)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class _AiohttpAnswer:
    __slots__ = ("status", "_response", "_content")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.status = response.status
        self._response = response
        self._content = response.content

    def header(self, name: str) -> str | None:
        return self._response.headers.get(name)

    async def read(self) -> bytes:
        try:
            return await self._content.readany()
        except TimeoutError:
            raise
        except aiohttp.ClientError as exc:
            raise TransportError(described(exc)) from None

    async def aclose(self) -> None:
        self._response.release()  # closes the connection instead when the body was not read to its end


def described(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
