"""What every HTTP vendor adapter shares: a pooled client per deployment (vendors/transport/client.py),
the choice of a deployment for each try (vendors/transport/balancer.py) and retries, timeouts, and the
reading of the vendor's answers until they prove to be answers (vendors/transport/answers.py). A failure
becomes the gateway's error in vendors/vendor_errors.py."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

import orjson

from gateway.core import observe
from gateway.core.clearance import Clearance
from gateway.core.config import Settings, VendorConfig
from gateway.core.errors import GatewayError, VendorCredentialsRejected, VendorNotReady
from gateway.core.streams import Watch, abandoned
from gateway.core.vendor_config import Deployment, Timeouts
from gateway.vendors.transport.answers import ANYWHERE, ELSEWHERE, Failure, R, Stream, StreamDecoder, T, as_is, whole
from gateway.vendors.transport.balancer import Balancer, Member, Ticket
from gateway.vendors.transport.proxies import Network, network
from gateway.vendors.transport.client import Answer, Client, TransportError, read_body
from gateway.vendors.transport.http1 import Http1Client
from gateway.vendors.vendor_errors import retry_after_seconds, transport_error

# Statuses worth another try: the vendor is busy or had a passing fault (529: Anthropic's "overloaded").
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
BACKOFF_BASE = 0.25  # seconds; attempt k waits up to BACKOFF_BASE * 2**k (full jitter)
BACKOFF_CAP = 8.0  # a longer Retry-After goes back to the client instead of being waited out here
# How much of a vendor's error answer (a non-200) is read: its message is at the start.
MAX_ERROR_BYTES = 64 << 10
# How much of a deployment's answer to a probe (GET /models) is read.
MAX_PROBE_BYTES = 1 << 20

log = logging.getLogger("gateway.vendors")
A = TypeVar("A")

# How `_send` waits between tries. A module attribute so that tests can record the delays the
# retry policy asks for instead of waiting them out (tests/integration/test_faults.py).
sleep = asyncio.sleep

# How an adapter turns a vendor's non-200 answer (status, body, Retry-After) into our error.
ErrorMapper = Callable[[int, bytes, str | None], GatewayError]
# What makes a deployment's client, for the process's life, from its headers, timeouts and network
# (its proxy and TLS context): the gateway's own HTTP/1.1 client (vendors/transport/http1.py), or a test's.
Clients = Callable[[Mapping[str, str], Timeouts, Network], Client]


class Sent(Protocol):
    """What the transport needs of a vendor call (core/completion.py): the request's clearance,
    awaited before the first byte leaves, and where the deployment that served it is named."""

    served_by: list[str]
    clearance: Clearance


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
        self._deployments = Deployments(config, Http1Client, headers, self._paths)

    @property
    def balancer(self) -> Balancer:
        """The deployments' routing and health state (GET /v5/vendors reads it)."""
        return self._deployments.balancer

    def use_clients(self, clients: Clients) -> None:
        """Send this vendor's requests through the clients `clients` makes instead of the gateway's
        own, with the same headers, base URLs and timeouts (in-process tests and benchmarks)."""
        self._deployments = Deployments(self._config, clients, self._headers, self._paths, self.balancer)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        await self._deployments.aclose()

    def not_ready(self) -> str | None:
        return None

    async def _post_json(self, path: str, payload: Any, call: Sent, read: Callable[[Any], R]) -> R:
        return await self._deployments.post_json(path, payload, self._error, call, read)

    def _sse_chunks(self, path: str, payload: Any, call: Sent,
                    decoder: Callable[[], StreamDecoder[T]]) -> AsyncIterator[list[T]]:
        return self._deployments.sse_chunks(path, payload, self._error, call, decoder)

    def _error(self, status: int, body: bytes, retry_after: str | None) -> GatewayError:
        raise NotImplementedError  # each adapter reads its vendor's error body


class _Upstream:
    """One deployment as the HTTP layer calls it: its client and the URLs of the adapter's
    paths, built once; another path (one naming the model) is joined per call."""

    __slots__ = ("member", "client", "base_url", "urls")

    def __init__(self, member: Member, client: Client, base_url: str, paths: Iterable[str]) -> None:
        self.member = member
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.urls = {path: self.base_url + path for path in paths}

    def url(self, path: str) -> str:
        return self.urls.get(path) or self.base_url + path


class Deployments:
    """A vendor's deployments, called over HTTP: each try goes to the deployment the balancer
    (vendors/transport/balancer.py) picks, and tells it how the deployment answered. The name of the
    deployment whose answer a call ends with is appended to its `served_by` (for the ledger)."""

    def __init__(self, config: VendorConfig, clients: Clients, headers: Callable[[str], Mapping[str, str]],
                 paths: Iterable[str] = (), balancer: Balancer | None = None) -> None:
        self.config = config
        self.balancer = balancer or Balancer(config.name, config.targets, config.routing, config.health)
        paths = tuple(paths)
        self._upstreams = [
            _Upstream(member, clients(headers(deployment.secret), config.timeouts, _network(config, index, deployment)),
                      deployment.base_url, paths)
            for index, (member, deployment) in enumerate(zip(self.balancer.members, config.targets, strict=True))
        ]

    async def aclose(self) -> None:
        for upstream in self._upstreams:
            await upstream.client.aclose()

    async def probe(self, path: str) -> list[tuple[str | None, Any] | None]:
        """GET `path` of every deployment, for what a server says of itself: per deployment, its
        `Server` header and its answer's JSON (None when it is not JSON, or not a 200), or None
        when it could not be asked. Not a request: no retry, no ticket."""
        return list(await asyncio.gather(*(_probe(upstream, path) for upstream in self._upstreams)))

    async def post_json(self, path: str, payload: Any, on_error: ErrorMapper, call: Sent,
                        read: Callable[[Any], R] = as_is) -> R:
        """POST a JSON body and return the vendor's JSON answer as `read` reads it (VendorFailed
        when it is not the vendor's format: another deployment is then asked); every failure is a
        GatewayError."""
        config = self.config

        async def accept(answer: Answer, ticket: Ticket) -> R | Failure:
            return await whole(config, answer, ticket.member.name, read)

        answer, ticket, result = await self._send(path, orjson.dumps(payload), on_error, call, accept)
        ticket.succeeded()
        ticket.close()
        await answer.aclose()
        return result

    async def sse_chunks(self, path: str, payload: Any, on_error: ErrorMapper, call: Sent,
                         decoder: Callable[[], StreamDecoder[T]]) -> AsyncIterator[list[T]]:
        """POST a JSON body and yield the chunks its answer's server-sent events make, as each
        read of the vendor's stream completes them (vendors/transport/answers.py `Stream`: its timeouts).
        A try is over once its first chunks came: until then a failure (garbage, a stream
        without an event, a vendor that went quiet) is tried again on another deployment, as
        nothing went to the client. Every failure is a GatewayError; the connection closes with
        the generator.

        The deployment did well when its stream came to its end, or when the stream's reader
        stopped (at a stop sequence, or because the client left) while it was answering."""
        config = self.config
        watch = Watch()

        async def accept(answer: Answer, ticket: Ticket) -> tuple[Stream[T], list[T]] | Failure:
            stream = Stream(config, answer, ticket.member.name, decoder(), watch)
            first = await stream.first()
            return first if isinstance(first, Failure) else (stream, first)

        try:
            answer, ticket, (stream, chunks) = await self._send(path, orjson.dumps(payload), on_error, call, accept)
        except BaseException:
            watch.close()
            raise
        try:
            while True:
                yield chunks
                chunks, fault = await stream.next()
                if fault is not None:
                    ticket.failed()
                    raise fault
                if stream.finished:
                    if chunks:
                        yield chunks
                    return
        finally:
            watch.close()
            ticket.succeeded()  # a no-op after a failure
            ticket.close()
            await answer.aclose()

    async def _send(self, path: str, body: bytes, on_error: ErrorMapper, call: Sent,
                    accept: Callable[[Answer, Ticket], Awaitable[A | Failure]]) -> tuple[Answer, Ticket, A]:
        """Send the request until a deployment's 200 answer is `accept`ed (its first chunks came,
        or it was read whole), and return it with its ticket and what `accept` made of it (the
        caller closes the answer and gives the ticket its verdict), or raise the gateway error
        its failure means. The answer's head is bounded by `first_byte` (the transport's).

        Connection failures and RETRY_STATUSES are retried up to `config.retries` times, and so
        are a timeout and an answer `accept` refuses, on another deployment only. This happens
        before anything went to the client (a stream's headers wait for its first chunk), so a
        retry is invisible to it. A retry goes to a deployment not tried yet when one can take
        it, at once; back on a deployment already tried it waits first, with exponential backoff
        and full jitter, honouring Retry-After (a longer one than BACKOFF_CAP goes back to the
        client). A deployment rejecting the gateway's key (401/403) is retried only elsewhere.

        A try still unanswered when its caller gives up (the client left) is the deployment's
        failure: a vendor that accepts calls and never answers them is ejected even when every
        client gives up before `first_byte`. One the gateway abandons because another call of the
        request failed (core/streams.py ABANDONED) says nothing of its deployment.
        """
        await call.clearance.wait()  # the request's limits let it go (core/clearance.py)
        served = call.served_by
        attempts = self.config.retries + 1
        balancer = self.balancer
        tried: list[Member] = []
        member = balancer.pick()
        while True:
            ticket = balancer.begin(member)
            answer: Answer | None = None
            try:
                tried_here = answer = await self._try(self._upstreams[member.index], ticket, path, body, on_error,
                                                      len(tried))
                if not isinstance(answer, Failure):
                    tried_here = await accept(answer, ticket)
                    if isinstance(tried_here, Failure):
                        ticket.failed()
                        await answer.aclose()
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError) and not abandoned(exc):
                    ticket.failed()  # given up on by its caller, unanswered
                ticket.close()
                if answer is not None and not isinstance(answer, Failure):
                    await answer.aclose()
                raise
            if not isinstance(tried_here, Failure):
                served.append(member.name)
                return answer, ticket, tried_here  # type: ignore[return-value]
            ticket.close()
            tried.append(member)
            try:
                member = await self._next(tried, tried_here, len(tried) < attempts)
            except GatewayError:
                served.append(tried[-1].name)
                raise

    async def _next(self, tried: list[Member], failure: Failure, budget_left: bool) -> Member:
        """The deployment of the next try after `failure` on the last one tried, or its error raised."""
        error, retry, retry_after = failure.error, failure.retry, failure.retry_after
        if retry is None or not budget_left:
            raise error
        balancer = self.balancer
        try:
            member = balancer.pick(tried)
        except VendorNotReady:
            raise error from None
        last = tried[-1]
        observer = observe.current()
        reason = failure.reason or (str(error.vendor_status) if error.vendor_status else "connection")
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
                   attempt: int) -> Answer | Failure:
        """One try on one deployment: its 200 answer, or how it failed. The ticket hears what the
        answer says of the deployment's health.

        A request is sent once more at once when its connection dropped before any answer: an
        HTTP/1.1 server may close a kept-alive connection just as the pool hands it out again
        (llama.cpp's server does it after every streamed answer although it announced keep-alive;
        a few requests in a hundred under concurrency failed). The vendor closed the connection
        without answering, so it did not serve the request, and its health is not in question.

        Each HTTP request is a span of the trace (`attempt`: how many tries came before)."""
        config = self.config
        url = upstream.url(path)
        resent_after_drop = False
        observer = observe.current()
        while True:
            span = observer.vendor_request(config.name, "POST", url, attempt + resent_after_drop)
            try:
                answer = await upstream.client.send(url, body)
            except (TransportError, TimeoutError) as exc:
                span.failed(exc)
                span.end()
                if isinstance(exc, TransportError) and exc.dropped and not resent_after_drop:
                    resent_after_drop = True
                    observer.vendor_retry(config.name, "connection_dropped")
                    await asyncio.sleep(0)  # lets the pool see the other connections the vendor closed
                    continue
                ticket.failed()
                if isinstance(exc, TimeoutError):
                    return Failure(transport_error(config, exc, upstream.member.name), ELSEWHERE, reason="timeout")
                return Failure(transport_error(config, exc, upstream.member.name), ANYWHERE)
            except BaseException as exc:  # cancelled: the client left
                span.failed(exc)
                span.end()
                raise
            break
        status = answer.status
        span.set({"http.response.status_code": status})
        if status == 200:
            span.end()
            ticket.answered()
            return answer
        try:
            said = await read_body(answer, MAX_ERROR_BYTES, truncate=True)
        except (TransportError, TimeoutError):
            said = b""
        finally:
            await answer.aclose()
        header = answer.header("retry-after")
        retry_after = retry_after_seconds(header)
        error = on_error(status, said, header)
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
        return Failure(error, retry, retry_after)


def _network(config: VendorConfig, index: int, deployment: Deployment) -> Network:
    """A deployment's proxy and TLS context, its own settings before its vendor's (vendors/transport/proxies.py)."""
    where = f"vendor {config.name!r}" + (f" deployment {deployment.name or index}" if config.deployments else "")
    return network(deployment.base_url, config.proxy_of(deployment), config.ca_file_of(deployment), where)


async def _probe(upstream: _Upstream, path: str) -> tuple[str | None, Any] | None:
    try:
        answer = await upstream.client.get(upstream.url(path))
    except (TransportError, TimeoutError):
        return None
    try:
        body = await read_body(answer, MAX_PROBE_BYTES, truncate=True)
    except (TransportError, TimeoutError):
        return None
    finally:
        await answer.aclose()
    try:
        data = orjson.loads(body) if answer.status == 200 else None
    except orjson.JSONDecodeError:
        data = None
    return answer.header("server"), data
