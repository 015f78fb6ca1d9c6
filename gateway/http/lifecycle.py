"""A request's lifecycle, for every endpoint that calls vendors: what it holds from the moment it is
admitted to the moment it is over, and the one way each of those is given back, however it ends
(answered, streamed to its end, its client gone, failed, cancelled).

| held                        | taken                            | given back                                  |
| --------------------------- | -------------------------------- | ------------------------------------------- |
| a slot of the gateway's     | `Lifecycle(...)` (a 503 when     | `end()`, or once the vendor finished        |
| admission                   | there is none)                   | (`finish`, `failed_midway`)                 |
| the meter: its one ledger   | `Lifecycle(...)`                 | closed once: `finish` (the vendor's usage), |
| row                         |                                  | `fail`, or by `end()` as `left`             |
| the limits' claim           | `ask(demand)`, once the request  | settled here with the row the meter gives   |
|                             | is planned                       | back as it closes; given back unused when   |
|                             |                                  | the client left before the verdict came     |
| the request's `clearance`   | `Lifecycle(...)`; deferred to    | when `call()` returns                       |
| (core/clearance.py)         | the limits' verdict by `call()`, |                                             |
|                             | for a single vendor call on a    |                                             |
|                             | shared limits store              |                                             |
| the vendor call `call()`    | `call()` returns it begun        | closed by the stream's response once handed |
| started (a stream's rest)   |                                  | to `stream()`, else by `fail()`             |

A request reads as its steps (http/serving.py): open the lifecycle, plan (every vendor call
carrying the lifecycle's `clearance`), `ask()` the limits, `call()` the vendor, shape the answer and
hand it to `answer()` or `stream()`; anything raised on the way goes to `fail()`, which closes what
is open and raises what answers it. A plain answer's lifecycle ends once the
answer was sent (or failed to be); a stream's when its response closes it. Nothing else settles
limits, closes a meter or gives an admission slot back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn, Protocol, TypeVar
from urllib.parse import quote

from starlette.responses import Response

from gateway.core.clearance import Clearance
from gateway.core.completion import Attempt, Choice, Usage
from gateway.core.errors import GatewayError, ValidationFailed
from gateway.http import event_stream
from gateway.http.context import HandlerRequest, Services
from gateway.http.observe import observability
from gateway.limits import on_request
from gateway.limits.verdicts import Grant
from gateway.store.meter import NO_ROW, Closed, Meter

log = logging.getLogger("gateway")


class Begun(Protocol):
    """A vendor call that has begun to answer (planner/fallbacks.py Started)."""

    async def aclose(self) -> None: ...


B = TypeVar("B", bound=Begun)


class Lifecycle:
    __slots__ = ("request_id", "meter", "grant", "clearance", "_request", "_account", "_check", "_admission",
                 "_admitted", "_begun")

    def __init__(self, request: HandlerRequest, request_id: str, account: str) -> None:
        services = request.services
        self.request_id = request_id
        self._request = request
        self._account = account
        self.meter: Meter = services.ledger.meter(request_id=request_id, account_id=account,
                                                  key_id=request.caller.key_id)
        observability.attach(request, self.meter)  # the access line and the request's metrics read it
        self._admission = services.admission
        self._admission.enter()  # a 503 when full: then nothing is held (a meter without a vendor call writes nothing)
        self._admitted = True
        self._begun: Begun | None = None  # the vendor call begun, until its stream is handed on
        self.grant: Grant = on_request.NO_LIMITS
        self._check: on_request.Check = on_request.UNLIMITED  # until `ask`
        # What every vendor call of the request waits on and reports generated text to.
        self.clearance = Clearance(heard=self.meter.generated)

    @property
    def account(self) -> str:
        """The account the request is billed to (and whose stored responses it may read)."""
        return self._account

    @property
    def services(self) -> Services:
        return self._request.services

    def ask(self, demand: on_request.Demand) -> None:
        """Ask the limits for the request's `demand` (once, planned or refused by the planner: a
        limit's refusal answers before the request's own mistake). A shared store answers while
        the vendor's request is built; the verdict is awaited by `call()` or `from_cache()`."""
        services = self._request.services
        self._check = on_request.check(services.limiter, key_id=self._request.caller.key_id, account=self._account,
                                       demand=demand, request_id=self.request_id, meter=self.meter)

    def fallbacks(self, chains: Mapping[str, Sequence[str]], model: str) -> Mapping[str, Sequence[str]]:
        """The fallback chains, less what the request's limits do not allow (on_request.Check)."""
        return self._check.fallbacks(chains, model)

    async def call(self, vendor_calls: int, work: Callable[[], Awaitable[B]]) -> B:
        """`work()`, the request's vendor call(s), under the limits' verdict and cancelled the moment
        the client leaves. One vendor call on a shared store awaits the verdict as its request is
        about to leave (its `clearance`); the calls of a fan-out start together, after it. A refusal
        raises, with its ledger row."""
        check = self._check
        if not (check.remote and vendor_calls == 1):
            await check.grant()
            return await self._granted(work)
        check.defer()
        self.clearance.defer_to(check.go_ahead)
        try:
            return await self._granted(work)
        finally:
            self.clearance.defer_to(None)

    async def _granted(self, work: Callable[[], Awaitable[B]]) -> B:
        begun = self._begun = await self._request.unless_client_leaves(work())
        self.grant = await self._check.grant()  # known by now: the vendor layer awaited it before asking
        return begun

    async def from_cache(self, attempt: Attempt) -> None:
        """The request is answered from the response cache instead of a vendor (http/cache.py):
        under the limits' verdict (a refusal raises, with its ledger row), its row a cache hit."""
        self.grant = await self._check.grant()
        self.meter.from_cache(attempt, self._request.services.settings.cache_hit_price)

    def headers(self, extra: Mapping[str, str] = {}) -> dict[str, str]:  # noqa: B006 (read only)
        """An answer's headers: its id, `extra` (values of the client's, such as a model name, made
        fit for a header), and the limits' x-ratelimit-* (all but `extra` on errors too)."""
        return {"x-request-id": self.request_id, **{name: header_value(value) for name, value in extra.items()},
                **on_request.headers(self.grant)}

    def sent(self, choices: Sequence[Choice]) -> None:
        """Text went to the client (what an estimate counts if the vendor's usage never comes)."""
        self.meter.sent(choices)

    async def estimated_usage(self, prompts: Sequence[str], echoed: Callable[[int], str],
                              answer: Sequence[Choice] | None = None) -> Usage:
        """The client's usage when the vendor reported none (store/meter.py)."""
        return await self.meter.estimated_usage(prompts, echoed, answer)

    def finish(self, billed: Usage | None, answer: Sequence[Choice] = ()) -> None:
        """The vendor finished: its row records `billed` (None: the vendor reported none, estimated);
        `answer` is a plain answer's choices, sent. What is left is writing (a stream's last events):
        the admission slot is given back now, before the client can have read them and asked again."""
        self._settle(self.meter.finish(billed, answer))
        self._leave()

    def failed_midway(self, exc: BaseException) -> None:
        """The answer had begun when `exc` ended it (a stream's error event follows, as its end)."""
        self._settle(self.meter.fail(exc))
        self._leave()

    async def fail(self, exc: BaseException) -> NoReturn:
        """The request failed with `exc` before its answer began: everything it holds is given back,
        its row written, and what answers the client is raised (a limit's refusal, when the limits
        refused it; the request id and x-ratelimit-* headers on every error)."""
        self.grant, answer = await self._check.failed(exc)
        begun, self._begun = self._begun, None
        try:
            if begun is not None:
                await begun.aclose()
        finally:
            self._settle(self.meter.fail(answer))
            self.end()
        if isinstance(answer, Exception) and not isinstance(answer, GatewayError | ValidationFailed):
            log.error("request %s failed in the gateway", self.request_id, exc_info=answer)
            answer = GatewayError("internal error in the gateway", code="internal_error")
        if isinstance(answer, GatewayError | ValidationFailed):  # the planner's 422s too
            answer.extra_headers = self.headers() | (answer.extra_headers or {})
        if answer is exc:
            raise exc
        raise answer from None

    def end(self) -> None:
        """The request is over: its admission slot is given back, and a meter still open closes as
        the client's leaving (a stream whose response ended before the vendor did)."""
        self._settle(self.meter.left())  # nothing once closed
        self._leave()

    def _leave(self) -> None:
        if self._admitted:
            self._admitted = False
            self._admission.leave()

    def _settle(self, closed: Closed) -> None:
        """The meter closed, giving back its row (NO_ROW: no vendor was called; a task: the row once
        its tokens are counted): the limits' claim is settled by it (a cache hit's: no tokens, and
        what it was billed in a budget in dollars: limits/limiter.py)."""
        if closed is None:
            return  # closed before: settled then
        if closed is NO_ROW:
            self.grant.settle(None)
        elif isinstance(closed, dict):
            self.grant.settle(closed)
        else:
            closed.add_done_callback(self._counted)

    def _counted(self, counting: asyncio.Task[dict[str, Any]]) -> None:
        if not counting.cancelled() and counting.exception() is None:
            self.grant.settle(counting.result())

    def answer(self, body: bytes, headers: dict[str, str], billed: Usage | None,
               choices: Sequence[Choice]) -> Response:
        """A plain answer (`body`, of `choices`), whose lifecycle ends once it was sent (or failed to be)."""
        return _Answer(body, headers, then=lambda: self._answered(billed, choices))

    def _answered(self, billed: Usage | None, choices: Sequence[Choice]) -> None:
        self.finish(billed, choices)
        self.end()

    def stream(self, events: event_stream.EventSource, headers: dict[str, str]) -> Response:
        """A stream of server-sent events (over the vendor call begun), whose lifecycle ends when its
        response closes them."""
        response = event_stream.EventStreamResponse(
            _Ending(events, self), headers=headers | {"cache-control": "no-cache"},
            send_timeout=self._request.services.settings.send_timeout)
        self._begun = None  # the response closes it now
        return response


def header_value(text: str) -> str:
    """`text` as a header can carry it: itself when it is printable ASCII without `%`, else
    percent-encoded (UTF-8; RFC 3986). A model name may hold any character the contract allows
    (`v2/ok€`, a NUL): sent as it is, it fails to encode after the vendor answered, or cuts the
    connection."""
    if text.isascii() and text.isprintable() and "%" not in text:
        return text
    return quote(text, safe=_SAFE)


_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in '%" ')


class _Answer(Response):
    """A plain answer, its lifecycle ended (`then`) once the answer was sent, or failed to be: the
    ledger row (its prices, the limits it settles) is built after the client has its bytes, not
    while the client waits for them. It runs before the task yields to the loop: the answer is one
    write (its head goes with its body, http/server/connection.py), which waits for nothing unless an
    earlier answer on the connection still waits to drain; so a limit's slot is free before the
    client can have read the answer and asked again. Nothing reads the row sooner either way: the
    ledger commits on a clock (store/ledger.py)."""

    def __init__(self, body: bytes, headers: dict[str, str], then: Callable[[], None]) -> None:
        super().__init__(body, media_type="application/json", headers=headers)
        self._then = then

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._then()


class _Ending:
    """A stream's events, whose closing (once, by the response, however it ends) ends the lifecycle."""

    __slots__ = ("_events", "_lifecycle")

    def __init__(self, events: event_stream.EventSource, lifecycle: Lifecycle) -> None:
        self._events = events
        self._lifecycle = lifecycle

    def __aiter__(self) -> Any:
        return self._events.__aiter__()

    async def aclose(self) -> None:
        try:
            await self._events.aclose()
        finally:
            self._lifecycle.end()
