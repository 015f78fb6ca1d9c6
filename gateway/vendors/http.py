"""What every HTTP vendor adapter shares: a pooled client per deployment (vendors/transport.py),
the choice of a deployment for each try (vendors/balancer.py) and retries, timeouts, and bounded
reads of the vendor's answers. A failure becomes the gateway's error in vendors/vendor_errors.py."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core import observe
from gateway.core.completion import cleared
from gateway.core.config import Settings, VendorConfig
from gateway.core.errors import GatewayError, VendorCredentialsRejected, VendorFailed, VendorNotReady
from gateway.core.streams import Watch
from gateway.core.vendor_config import Timeouts
from gateway.vendors.balancer import Balancer, Member, Ticket
from gateway.vendors.sse_reader import Event, EventParser, MalformedStream
from gateway.vendors.transport import Answer, Client, TooLarge, TransportError, read_body
from gateway.vendors.transport_http1 import Http1Client
from gateway.vendors.vendor_errors import retry_after_seconds, transport_error

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
# How much of a deployment's answer to a probe (GET /models) is read.
MAX_PROBE_BYTES = 1 << 20
# Where a failed try may be retried: on any deployment, or only on another one (a deployment that
# refused the gateway's key: another deployment has another key).
ANYWHERE, ELSEWHERE = "anywhere", "elsewhere"

log = logging.getLogger("gateway.vendors")

# How `_send` waits between tries. A module attribute so that tests can record the delays the
# retry policy asks for instead of waiting them out (tests/integration/test_faults.py).
sleep = asyncio.sleep

# How an adapter turns a vendor's non-200 answer (status, body, Retry-After) into our error.
ErrorMapper = Callable[[int, bytes, str | None], GatewayError]
# What makes a deployment's client, for the process's life, from its headers and timeouts: the
# gateway's own HTTP/1.1 client (vendors/transport_http1.py), or a test's.
Clients = Callable[[Mapping[str, str], Timeouts], Client]


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

    async def _post_json(self, path: str, payload: Any, served: list[str]) -> Any:
        return await self._deployments.post_json(path, payload, self._error, served)

    def _sse_events(self, path: str, payload: Any, served: list[str]) -> AsyncIterator[list[Event]]:
        return self._deployments.sse_events(path, payload, self._error, served)

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
    (vendors/balancer.py) picks, and tells it how the deployment answered. The name of the
    deployment whose answer a call ends with is appended to `served` (for the ledger)."""

    def __init__(self, config: VendorConfig, clients: Clients, headers: Callable[[str], Mapping[str, str]],
                 paths: Iterable[str] = (), balancer: Balancer | None = None) -> None:
        self.config = config
        self.balancer = balancer or Balancer(config.name, config.targets, config.routing, config.health)
        paths = tuple(paths)
        self._upstreams = [
            _Upstream(member, clients(headers(deployment.secret), config.timeouts), deployment.base_url, paths)
            for member, deployment in zip(self.balancer.members, config.targets, strict=True)
        ]

    async def aclose(self) -> None:
        for upstream in self._upstreams:
            await upstream.client.aclose()

    async def probe(self, path: str) -> list[tuple[str | None, Any] | None]:
        """GET `path` of every deployment, for what a server says of itself: per deployment, its
        `Server` header and its answer's JSON (None when it is not JSON, or not a 200), or None
        when it could not be asked. Not a request: no retry, no ticket."""
        return list(await asyncio.gather(*(_probe(upstream, path) for upstream in self._upstreams)))

    async def post_json(self, path: str, payload: Any, on_error: ErrorMapper, served: list[str]) -> Any:
        """POST a JSON body and return the vendor's JSON answer; every failure is a GatewayError."""
        config = self.config
        answer, ticket = await self._send(path, orjson.dumps(payload), on_error, None, served)
        try:
            body = await read_body(answer, MAX_ANSWER_BYTES)
            data = orjson.loads(body)
        except (TransportError, TimeoutError) as exc:
            ticket.failed()
            raise transport_error(config, exc, ticket.member.name) from None
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
            await answer.aclose()
        return data

    async def sse_events(self, path: str, payload: Any, on_error: ErrorMapper,
                         served: list[str]) -> AsyncIterator[list[Event]]:
        """POST a JSON body and yield the server-sent events of the answer, the events each read
        of it completes as one list. Held to the vendor's timeouts: `first_byte` for the head and
        again for the first piece of the body, `idle` between two pieces, `total` for the body
        as a whole, all kept by one timer (core/streams.py `Watch`; a wait never spans a yield).
        Every failure is a GatewayError. The connection closes with the generator.

        A stream its reader stops (at its end marker, or because the client left) after events
        came without a fault went well, as far as the deployment's health is concerned."""
        config = self.config
        timeouts = config.timeouts
        watch = Watch()
        try:
            answer, ticket = await self._send(path, orjson.dumps(payload), on_error, watch, served)
        except BaseException:
            watch.close()
            raise
        flowing = False
        parser = EventParser()
        read, wait = answer.read, watch.wait
        try:
            limit = timeouts.first_byte
            ends = watch.now() + timeouts.total
            while piece := await wait(read(), min(watch.now() + limit, ends)):
                limit = timeouts.idle
                if events := parser.feed(piece):
                    flowing = True
                    yield events
        except (TransportError, TimeoutError) as exc:
            ticket.failed()
            raise transport_error(config, exc, ticket.member.name) from None
        except MalformedStream as exc:
            ticket.failed()
            raise VendorFailed(f"vendor '{config.name}' sent a malformed stream: {exc}", vendor=config.name) from None
        finally:
            watch.close()
            if flowing:
                ticket.succeeded()  # a no-op after a failure
            ticket.close()
            await answer.aclose()

    async def _send(self, path: str, body: bytes, on_error: ErrorMapper, watch: Watch | None,
                    served: list[str]) -> tuple[Answer, Ticket]:
        """Send the request and return the vendor's 200 answer with its body still to be read
        (the caller closes it and its ticket), or raise the gateway error its failure means.
        With a stream's `watch`, the wait for the answer's head is bounded by `first_byte` (a
        non-streamed head comes with the whole answer).

        Connection failures and RETRY_STATUSES are retried up to `config.retries` times. This
        happens before anything went to the client (a stream's headers wait for its first chunk),
        so a retry is invisible to it. A retry goes to a deployment not tried yet when one can
        take it, at once; back on a deployment already tried it waits first, with exponential
        backoff and full jitter, honouring Retry-After (a longer one than BACKOFF_CAP goes back to
        the client). A deployment rejecting the gateway's key (401/403) is retried only elsewhere.
        Timeouts are not retried: the time is already spent.
        """
        await cleared()  # the request's limits let it go (core/completion.py)
        attempts = self.config.retries + 1
        balancer = self.balancer
        tried: list[Member] = []
        member = balancer.pick()
        while True:
            ticket = balancer.begin(member)
            try:
                tried_here = await self._try(self._upstreams[member.index], ticket, path, body, on_error, watch,
                                             len(tried))
            except BaseException:
                ticket.close()
                raise
            if not isinstance(tried_here, Failure):
                served.append(member.name)
                return tried_here, ticket
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
                   watch: Watch | None, attempt: int) -> Answer | Failure:
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
                sending = upstream.client.send(url, body)
                answer = await (sending if watch is None else
                                watch.wait(sending, watch.now() + config.timeouts.first_byte))
            except (TransportError, TimeoutError) as exc:
                span.failed(exc)
                span.end()
                if isinstance(exc, TransportError) and exc.dropped and not resent_after_drop:
                    resent_after_drop = True
                    observer.vendor_retry(config.name, "connection_dropped")
                    await asyncio.sleep(0)  # lets the pool see the other connections the vendor closed
                    continue
                ticket.failed()
                return Failure(transport_error(config, exc, upstream.member.name),
                               None if isinstance(exc, TimeoutError) else ANYWHERE)
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


@dataclass(frozen=True, slots=True)
class Failure:
    """How one try on one deployment failed: the error, whether and where it may be tried again
    (ANYWHERE, ELSEWHERE or None), and the vendor's Retry-After."""

    error: GatewayError
    retry: str | None = None
    retry_after: float | None = None
