"""The HTTP clients under the vendor adapters: one small interface, three clients behind it.

`Client.send` posts a body and returns the vendor's `Answer` once its head has arrived; the body is
then read a piece at a time, as the network delivers it (`Answer.read`). What can go wrong is
either a `TimeoutError` or a `TransportError` (with `dropped` when the connection closed before
any answer came), whichever library is underneath, so vendors/http.py handles failures once.

- `Http1Client` (vendors/transport_http1.py), the default: the gateway's own HTTP/1.1 client,
  which does what a vendor call needs and nothing else.
- `AiohttpClient` (vendors/transport_aiohttp.py; `GATEWAY_HTTP_TRANSPORT=aiohttp`): aiohttp's pool,
  called directly, the default before: it cost a request about a fifth of the gateway's CPU. httpx's
  own pool is slower still under concurrency (encode/httpx#3215), and httpx's API over aiohttp
  (httpx-aiohttp) costs a request and every piece of a stream several layers of Python more.
- `HttpxClient` (vendors/transport_httpx.py, imported only when used): httpx's own pool
  (`GATEWAY_HTTP_TRANSPORT=httpx`, which bench/ compares), or any httpx transport of the caller's
  (in-process tests answer through httpx.MockTransport).
"""

from __future__ import annotations

import functools
import os
import ssl
from typing import Protocol

import certifi

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


def described(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
