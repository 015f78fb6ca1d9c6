"""The gateway's client interface (gateway/vendors/transport/client.py `Client`) answered in-process, for
tests and benchmarks that call an adapter without a network: `answered_by(handler)` makes the
clients a vendor's deployments use (`HttpAdapter.use_clients`), each handing every request, as an
httpx.Request, to `handler`, which returns the httpx.Response the vendor would (httpx.MockTransport's
contract). The requests carry the deployment's headers, URLs and timeouts as the gateway's own
client would send them; what they never exercise is that client (tests/unit/test_transport_http1.py
and every test over real HTTP do)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import httpx

from gateway.core.vendor_config import Timeouts
from gateway.vendors.transport.proxies import Network
from gateway.vendors.transport.client import Answer, Client, TransportError, described

Handler = Callable[[httpx.Request], httpx.Response]


def answered_by(handler: Handler) -> Callable[[Mapping[str, str], Timeouts, Network], Client]:
    """Clients whose every request `handler` answers (in-process: no network, so no proxy nor TLS)."""
    return lambda headers, timeouts, network: HttpxClient(headers, timeouts, httpx.MockTransport(handler))


class HttpxClient:
    """One deployment's connections through an httpx transport (here, httpx.MockTransport)."""

    def __init__(self, headers: Mapping[str, str], timeouts: Timeouts, transport: httpx.AsyncBaseTransport) -> None:
        self._client = httpx.AsyncClient(
            headers={**headers, "content-type": "application/json"},
            timeout=httpx.Timeout(connect=timeouts.connect, read=timeouts.total, write=timeouts.connect,
                                  pool=timeouts.connect),
            transport=transport,
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
