"""`AiohttpClient`: a deployment's connections through aiohttp's pool, called directly
(`GATEWAY_HTTP_TRANSPORT=aiohttp`; vendors/transport.py has the interface). Imported only by a
gateway that asked for it."""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from gateway.core.vendor_config import Timeouts
from gateway.vendors.transport import MAX_CONNECTIONS, Answer, TransportError, connect_failure, described, tls


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
        return await self._request("POST", url, body)

    async def get(self, url: str) -> Answer:
        return await self._request("GET", url, None)

    async def _request(self, method: str, url: str, body: bytes | None) -> Answer:
        session = self._session or self._open()
        try:
            response = await session.request(method, url, data=body, headers=self._headers, allow_redirects=False)
        except TimeoutError:
            raise
        except aiohttp.ClientConnectorError as exc:  # refused, unresolvable: not a dropped connection
            raise TransportError(connect_failure(exc.os_error), where=described(exc)) from None
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise TransportError("the connection closed before any answer", where=described(exc),
                                 dropped=True) from None
        except aiohttp.ClientError as exc:
            raise TransportError("the connection failed", where=described(exc)) from None
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
            raise TransportError("the connection failed", where=described(exc)) from None

    async def aclose(self) -> None:
        self._response.release()  # closes the connection instead when the body was not read to its end
