"""The HTTP client under the vendor adapters: one small interface, and the gateway's own client
behind it (`Http1Client`, vendors/transport/http1.py).

`Client.send` posts a body and returns the vendor's `Answer` once its head has arrived; the body is
then read a piece at a time, as the network delivers it (`Answer.read`). What can go wrong is
either a `TimeoutError` or a `TransportError` (with `dropped` when the connection closed before
any answer came), so vendors/transport/http.py handles failures once. In-process tests and benchmarks put
clients of their own behind the same interface (`HttpAdapter.use_clients`; tests/support/fakes/
httpx_client.py). aiohttp's pool (the default once) and httpx's were measured against this client
and removed: docs/performance.md has the comparison.
"""

from __future__ import annotations

import functools
import os
import socket
import ssl
from typing import Protocol

import certifi

MAX_CONNECTIONS = 512  # per deployment


class TransportError(Exception):
    """The vendor could not be talked to (refused, reset, a broken body). `reason` says what
    happened without saying where (a client may read it: no address, never a key); `where` is the
    address, or the library's own description, for the log. `dropped`: the connection closed under
    a request before any answer came (then the vendor did not serve it)."""

    def __init__(self, reason: str, *, where: str = "", dropped: bool = False) -> None:
        super().__init__(f"{where}: {reason}" if where else reason)
        self.reason = reason
        self.dropped = dropped


def connect_failure(exc: OSError) -> str:
    """What a failure to connect was, without the address it was to."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return "its host name does not resolve"
    if isinstance(exc, ssl.SSLCertVerificationError):
        # OpenSSL's why ("unable to get local issuer certificate", "Hostname mismatch, ..."), never
        # an address of ours but the vendor's own host name, which the error's redaction replaces.
        why = f" ({exc.verify_message})" if exc.verify_message else ""
        return f"its TLS certificate could not be verified{why}"
    if isinstance(exc, ssl.SSLError):
        return "TLS failed"
    if exc.strerror:
        return f"connection failed: {exc.strerror.lower()}"
    return "connection failed"


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

    async def get(self, url: str) -> Answer:
        """GET `url` (absolute): what a server says of itself, asked once as the gateway starts."""

    async def aclose(self) -> None: ...


@functools.cache
def tls(ca_file: str = "") -> ssl.SSLContext:
    """The vendors' TLS context, one per process and CA file, for every client: the roots of
    `ca_file` alone (a vendor's private CA), else those of SSL_CERT_FILE / SSL_CERT_DIR (as httpx
    and OpenSSL choose them), else certifi's. Always verifying, host names checked."""
    if ca_file:
        return ssl.create_default_context(cafile=ca_file)
    if cafile := os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=cafile)
    if capath := os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=capath)
    return ssl.create_default_context(cafile=certifi.where())


def described(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


class TooLarge(Exception):
    """A vendor's answer is longer than the gateway reads."""


async def read_body(answer: Answer, limit: int, *, truncate: bool = False) -> bytes:
    """The body of `answer`, at most `limit` bytes (decoded): longer is TooLarge, or with
    `truncate` its first `limit` bytes. A declared Content-Length over the limit is refused unread."""
    declared = answer.header("content-length") or ""
    if not truncate and declared.isdigit() and int(declared) > limit:
        raise TooLarge()
    body = bytearray()
    while piece := await answer.read():
        body += piece
        if len(body) > limit:
            if truncate:
                return bytes(body[:limit])
            raise TooLarge()
    return bytes(body)
