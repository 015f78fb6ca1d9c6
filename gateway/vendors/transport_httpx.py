"""`HttpxClient`: a deployment's connections through httpx (vendors/transport.py has the
interface and the default client). A module of its own so that a gateway on aiohttp, the default,
never imports httpx."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from gateway.core.vendor_config import Timeouts
from gateway.vendors.transport import MAX_CONNECTIONS, Answer, TransportError, described, tls


class HttpxClient:
    """One deployment's connections through httpx: its own pool, or `transport`."""

    def __init__(self, headers: Mapping[str, str], timeouts: Timeouts,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS)
        self._client = httpx.AsyncClient(
            headers={**headers, "content-type": "application/json"},
            timeout=httpx.Timeout(connect=timeouts.connect, read=timeouts.total, write=timeouts.connect,
                                  pool=timeouts.connect),
            transport=transport or httpx.AsyncHTTPTransport(limits=limits, verify=tls()),
        )

    async def send(self, url: str, body: bytes) -> Answer:
        return await self._request("POST", url, body)

    async def get(self, url: str) -> Answer:
        return await self._request("GET", url, None)

    async def _request(self, method: str, url: str, body: bytes | None) -> Answer:
        client = self._client
        try:
            response = await client.send(client.build_request(method, url, content=body), stream=True)
        except httpx.TimeoutException:
            raise TimeoutError() from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise TransportError("the connection closed before any answer", where=described(exc),
                                 dropped=True) from None
        except httpx.HTTPError as exc:
            raise TransportError("the connection failed", where=described(exc)) from None
        return _HttpxAnswer(response)

    async def aclose(self) -> None:
        await self._client.aclose()


class _HttpxAnswer:
    __slots__ = ("status", "_response", "_pieces")

    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self._response = response
        self._pieces = response.aiter_bytes()

    def header(self, name: str) -> str | None:
        return self._response.headers.get(name)

    async def read(self) -> bytes:
        try:
            return await anext(self._pieces, b"")
        except httpx.TimeoutException:
            raise TimeoutError() from None
        except httpx.HTTPError as exc:
            raise TransportError("the connection failed", where=described(exc)) from None

    async def aclose(self) -> None:
        await self._response.aclose()
