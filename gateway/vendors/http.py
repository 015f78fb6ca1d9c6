"""What every HTTP vendor adapter shares: a pooled client per deployment, the choice of a
deployment for each try (vendors/balancer.py) and retries, timeouts, and bounded reads of the
vendor's answers. A failure becomes the gateway's error in vendors/vendor_errors.py."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import httpx
import orjson
from httpx_aiohttp import AiohttpTransport

from gateway.core import observe
from gateway.core.config import Deployment, Settings, VendorConfig
from gateway.core.errors import GatewayError, VendorCredentialsRejected, VendorFailed, VendorNotReady
from gateway.vendors.balancer import Balancer, Member, Ticket
from gateway.vendors.sse_reader import Event, MalformedStream, read_events
from gateway.vendors.vendor_errors import connection_dropped, is_timeout, retry_after_seconds, transport_error

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
# Where a failed try may be retried: on any deployment, or only on another one (a deployment that
# refused the gateway's key: another deployment has another key).
ANYWHERE, ELSEWHERE = "anywhere", "elsewhere"

log = logging.getLogger("gateway.vendors")

# How `_send` waits between tries. A module attribute so that tests can record the delays the
# retry policy asks for instead of waiting them out (tests/test_faults.py).
sleep = asyncio.sleep

# How an adapter turns a vendor's non-200 answer (status, body, Retry-After) into our error.
ErrorMapper = Callable[[int, bytes, str | None], GatewayError]


class HttpAdapter:
    """What every adapter over HTTP shares: its vendor's configuration, its deployments (one pooled
    client each for the process's life, opened here, closed by `close()`), and nothing to wait for
    before serving. `headers` gives the headers a deployment sends for its key; `paths` are the
    paths the adapter posts to, whose URLs each deployment builds once."""

    def __init__(self, config: VendorConfig, settings: Settings, headers: Callable[[str], Mapping[str, str]],
                 paths: Iterable[str] = ()) -> None:
        self.name = config.name
        self._config = config
        self._headers = headers
        self._paths = tuple(paths)
        self._deployments = Deployments(config, settings.http_transport, headers, self._paths)

    @property
    def balancer(self) -> Balancer:
        """The deployments' routing and health state (GET /v5/vendors reads it)."""
        return self._deployments.balancer

    def use_transport(self, transport: httpx.AsyncBaseTransport) -> None:
        """Send this vendor's requests through `transport` instead of the network, with the same
        headers, base URLs and timeouts (in-process tests: httpx.MockTransport)."""
        self._deployments = Deployments(self._config, transport, self._headers, self._paths, self.balancer)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        await self._deployments.aclose()

    def not_ready(self) -> str | None:
        return None

    async def _post_json(self, path: str, payload: Any, served: list[str]) -> Any:
        return await self._deployments.post_json(path, payload, self._error, served)

    def _sse_events(self, path: str, payload: Any, served: list[str]) -> AsyncIterator[Event]:
        return self._deployments.sse_events(path, payload, self._error, served)

    def _error(self, status: int, body: bytes, retry_after: str | None) -> GatewayError:
        raise NotImplementedError  # each adapter reads its vendor's error body


def pooled_client(config: VendorConfig, deployment: Deployment, transport: str | httpx.AsyncBaseTransport,
                  headers: Mapping[str, str]) -> httpx.AsyncClient:
    """One client per deployment for the process's life. `transport` picks the I/O under httpx's
    API: "aiohttp" (httpx-aiohttp: httpx's own pool is slow under concurrency, encode/httpx#3215; the
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
        base_url=deployment.base_url,
        headers=dict(headers),
        # A non-streamed answer arrives whole at the end, so its only read limit is `total`;
        # streams are held to `first_byte` and `idle` by paced().
        timeout=httpx.Timeout(connect=t.connect, read=t.total, write=t.connect, pool=t.connect),
        transport=io,
    )


class _Upstream:
    """One deployment as the HTTP layer calls it: its client and its URLs, built once (httpx
    parses and merges a relative URL on every request). Another path is merged by the client."""

    __slots__ = ("member", "client", "urls")

    def __init__(self, member: Member, client: httpx.AsyncClient, base_url: str, paths: Iterable[str]) -> None:
        self.member = member
        self.client = client
        self.urls = {path: httpx.URL(f"{base_url}{path}") for path in paths}

    def request(self, path: str, body: bytes) -> httpx.Request:
        return self.client.build_request("POST", self.urls.get(path, path), content=body, headers=_JSON)


class Deployments:
    """A vendor's deployments, called over HTTP: each try goes to the deployment the balancer
    (vendors/balancer.py) picks, and tells it how the deployment answered. The name of the
    deployment whose answer a call ends with is appended to `served` (for the ledger)."""

    def __init__(self, config: VendorConfig, transport: str | httpx.AsyncBaseTransport,
                 headers: Callable[[str], Mapping[str, str]], paths: Iterable[str] = (),
                 balancer: Balancer | None = None) -> None:
        self.config = config
        self.balancer = balancer or Balancer(config.name, config.targets, config.routing, config.health)
        paths = tuple(paths)
        self._upstreams = [
            _Upstream(member, pooled_client(config, deployment, transport, headers(deployment.secret)),
                      deployment.base_url, paths)
            for member, deployment in zip(self.balancer.members, config.targets, strict=True)
        ]

    async def aclose(self) -> None:
        for upstream in self._upstreams:
            await upstream.client.aclose()

    async def post_json(self, path: str, payload: Any, on_error: ErrorMapper, served: list[str]) -> Any:
        """POST a JSON body and return the vendor's JSON answer; every failure is a GatewayError."""
        config = self.config
        response, ticket = await self._send(path, orjson.dumps(payload), on_error, None, served)
        try:
            body = await read_body(response, MAX_ANSWER_BYTES)
            answer = orjson.loads(body)
        except httpx.HTTPError as exc:
            ticket.failed()
            raise transport_error(config, exc) from None
        except TooLarge:
            ticket.failed()
            raise VendorFailed(f"vendor '{config.name}' sent an answer larger than {MAX_ANSWER_BYTES} bytes",
                               vendor=config.name) from None
        except orjson.JSONDecodeError as exc:
            ticket.failed()
            raise VendorFailed(f"vendor '{config.name}' sent a malformed answer: not JSON (at byte {exc.pos})",
                               vendor=config.name) from None
        else:
            ticket.succeeded()
        finally:
            ticket.close()
            await response.aclose()
        return answer

    async def sse_events(self, path: str, payload: Any, on_error: ErrorMapper, served: list[str]) -> AsyncIterator[Event]:
        """POST a JSON body and yield the server-sent events of the answer, held to the vendor's
        timeouts (`paced`); every failure is a GatewayError. The connection closes with the generator.

        A stream its reader stops (at its end marker, or because the client left) after events
        came without a fault went well, as far as the deployment's health is concerned."""
        config = self.config
        timeouts = config.timeouts
        response, ticket = await self._send(path, orjson.dumps(payload), on_error, timeouts.first_byte, served)
        flowing = False
        try:
            body_chunks = paced(response.aiter_bytes(), timeouts.first_byte, timeouts.idle, timeouts.total)
            async for event in read_events(body_chunks):
                flowing = True
                yield event
        except (httpx.HTTPError, TimeoutError) as exc:
            ticket.failed()
            raise transport_error(config, exc) from None
        except MalformedStream as exc:
            ticket.failed()
            raise VendorFailed(f"vendor '{config.name}' sent a malformed stream: {exc}", vendor=config.name) from None
        finally:
            if flowing:
                ticket.succeeded()  # a no-op after a failure
            ticket.close()
            await response.aclose()

    async def _send(self, path: str, body: bytes, on_error: ErrorMapper, first_byte: float | None,
                    served: list[str]) -> tuple[httpx.Response, Ticket]:
        """Send the request and return the vendor's 200 response with its body still to be read
        (the caller closes it and its ticket), or raise the gateway error its failure means.
        `first_byte` bounds the wait for the response head (a stream's; a non-streamed head
        comes with the whole answer).

        Connection failures and RETRY_STATUSES are retried up to `config.retries` times. This
        happens before anything went to the client (a stream's headers wait for its first chunk),
        so a retry is invisible to it. A retry goes to a deployment not tried yet when one can
        take it, at once; back on a deployment already tried it waits first, with exponential
        backoff and full jitter, honouring Retry-After (a longer one than BACKOFF_CAP goes back to
        the client). A deployment rejecting the gateway's key (401/403) is retried only elsewhere.
        Timeouts are not retried: the time is already spent.
        """
        attempts = self.config.retries + 1
        balancer = self.balancer
        tried: list[Member] = []
        member = balancer.pick()
        while True:
            ticket = balancer.begin(member)
            try:
                response, error, retry, retry_after = await self._try(self._upstreams[member.index], ticket, path,
                                                                      body, on_error, first_byte, len(tried))
            except BaseException:
                ticket.close()
                raise
            if response is not None:
                served.append(member.name)
                return response, ticket
            ticket.close()
            tried.append(member)
            try:
                member = await self._next(tried, error, retry, retry_after, len(tried) < attempts)
            except GatewayError:
                served.append(tried[-1].name)
                raise

    async def _next(self, tried: list[Member], error: GatewayError, retry: str | None, retry_after: float | None,
                    budget_left: bool) -> Member:
        """The deployment of the next try after `error` on the last one tried, or `error` raised."""
        if retry is None or not budget_left:
            raise error
        balancer = self.balancer
        try:
            member = balancer.pick(tried)
        except VendorNotReady:
            raise error from None
        last = tried[-1]
        observer = observe.current()
        reason = str(error.vendor_status) if error.vendor_status else "connection"
        if member not in tried:
            log.info("vendor %s: %s (deployment %s); retry %d/%d on deployment %s", self.config.name, error.message,
                     last.name, len(tried), self.config.retries, member.name)
            observer.vendor_retry(self.config.name, reason)
            return member
        if retry == ELSEWHERE or (retry_after or 0) > BACKOFF_CAP:
            raise error
        delay = retry_after if retry_after is not None else random.uniform(0, BACKOFF_BASE * 2 ** (len(tried) - 1))
        log.info("vendor %s: %s; retry %d/%d in %.2fs", self.config.name, error.message, len(tried),
                 self.config.retries, delay)
        observer.vendor_retry(self.config.name, reason)
        await sleep(delay)
        try:
            return balancer.pick(tried)
        except VendorNotReady:
            raise error from None

    async def _try(self, upstream: _Upstream, ticket: Ticket, path: str, body: bytes, on_error: ErrorMapper,
                   first_byte: float | None, attempt: int) -> tuple[httpx.Response | None, Any, str | None, float | None]:
        """One try on one deployment: its 200 response, or (None, the error, whether and where it
        may be retried (ANYWHERE, ELSEWHERE or None), the vendor's Retry-After). The ticket hears
        what the answer says of the deployment's health.

        A request is sent once more at once when its connection dropped before any answer: an
        HTTP/1.1 server may close a kept-alive connection just as the pool hands it out again
        (llama.cpp's server does it after every streamed answer although it announced keep-alive;
        a few requests in a hundred under concurrency failed). The vendor closed the connection
        without answering, so it did not serve the request, and its health is not in question.

        Each HTTP request is a span of the trace (`attempt`: how many tries came before)."""
        config = self.config
        request = upstream.request(path, body)
        resent_after_drop = False
        observer = observe.current()
        while True:
            span = observer.vendor_request(config.name, request.method, request.url, attempt + resent_after_drop)
            try:
                async with asyncio.timeout(first_byte):
                    response = await upstream.client.send(request, stream=True)
            except (httpx.HTTPError, TimeoutError) as exc:
                span.failed(exc)
                span.end()
                if connection_dropped(exc) and not resent_after_drop:
                    resent_after_drop = True
                    observer.vendor_retry(config.name, "connection_dropped")
                    await asyncio.sleep(0)  # lets the pool see the other connections the vendor closed
                    continue
                ticket.failed()
                return None, transport_error(config, exc), None if is_timeout(exc) else ANYWHERE, None
            except BaseException as exc:  # cancelled: the client left
                span.failed(exc)
                span.end()
                raise
            break
        status = response.status_code
        span.set({"http.response.status_code": status})
        if status == 200:
            span.end()
            ticket.answered()
            return response, None, None, None
        try:
            answer = await read_body(response, MAX_ERROR_BYTES, truncate=True)
        except httpx.HTTPError:
            answer = b""
        finally:
            await response.aclose()
        header = response.headers.get("retry-after")
        retry_after = retry_after_seconds(header)
        error = on_error(status, answer, header)
        error.vendor_status = status
        span.failed(error)
        span.end()
        key_rejected = isinstance(error, VendorCredentialsRejected)  # however the vendor says it
        if status >= 500 or key_rejected:
            ticket.failed()  # the deployment's fault
        elif status == 429:
            if retry_after:
                ticket.rest(retry_after)
        else:
            ticket.succeeded()  # up, and answering the request's own mistake
        retry = ANYWHERE if status in RETRY_STATUSES else ELSEWHERE if key_rejected else None
        return None, error, retry, retry_after


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
