"""Limits as a request of any endpoint meets them (limits/limiter.py does the counting): the check
of its demand (core/demand.py, which the endpoint's unit says), the answer to a refusal, and
OpenAI's x-ratelimit-* headers.

A refused request reaches no vendor and is billed nothing; its ledger row (outcome `refused`, no
tokens) is what the usage report counts. One that is let through has its grant settled by its
lifecycle when its meter closes, with the row's real usage (also when it failed, was cut short or
its client left).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping, Sequence

from gateway.core import observe
from gateway.core.clearance import Withheld
from gateway.core.demand import Demand
from gateway.core.endpoint import Endpoint
from gateway.core.errors import (
    ClientDisconnected,
    GatewayError,
    LimitsUnavailable,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    RequestTooLarge,
    clip,
)
from gateway.limits import counters
from gateway.limits import verdicts
from gateway.limits.counters import RPM
from gateway.limits.limiter import Limiter
from gateway.limits.rules import Budget, Limits, Subject, Unit
from gateway.limits.verdicts import NO_LIMITS, Asking, Grant
from gateway.store import tokens
from gateway.store.meter import Meter

__all__ = ["NO_LIMITS", "Check", "Demand", "admit_call", "check", "headers"]
log = logging.getLogger("gateway.limits")


def prompt_tokens(demand: Demand) -> int:
    """The demand's prompt tokens, counted with the offline counter the ledger estimates with
    (store/tokens.py) the first time a limit asks."""
    if demand.prompt_tokens is None:
        demand.prompt_tokens = sum(tokens.counts(tokens.counter(demand.model), demand.prompts_sent))
    return demand.prompt_tokens


def check(limiter: Limiter, *, key_id: str, account: str, demand: Demand, request_id: str, meter: Meter) -> Check:
    """The limits' verdict on the request, asked for now and awaited with `Check.grant()`."""
    if not limiter.table.subjects:
        return UNLIMITED
    return Check(limiter.ask(key_id=key_id, account=account, model=demand.model, prompt_tokens=prompt_tokens(demand),
                             completion_tokens=demand.completion_tokens, request_id=request_id,
                             hit_share=demand.hit_share), key_id, demand, meter)


class Check:
    """A request's limits check, asked for once the request is planned. A shared store works on it
    meanwhile: its verdict is awaited as late as can be, by the vendor layer as the vendor's request
    is about to leave (`defer`, `go_ahead`: the request's clearance, core/clearance.py), else by the
    lifecycle before any vendor is called (`grant`). Either way it is awaited, or `release`d, on every way a request takes: a
    claim the store took holds a slot until it is settled (http/lifecycle.py settles it)."""

    __slots__ = ("_asked", "_key_id", "_demand", "_meter", "_grant", "_refusal", "_verdict")

    def __init__(self, asked: Grant | Asking, key_id: str, demand: Demand, meter: Meter) -> None:
        self._asked, self._key_id, self._demand, self._meter = asked, key_id, demand, meter
        self._grant: Grant | None = NO_LIMITS if asked is NO_LIMITS else None  # (others: once `grant` ran)
        self._refusal: GatewayError | None = None
        self._verdict: asyncio.Future[Grant] | None = None

    @property
    def remote(self) -> bool:
        """Whether the verdict is on its way from a shared store (worth awaiting late)."""
        return self._grant is None and self._asked.remote

    @property
    def subjects(self) -> tuple[tuple[Subject, Limits], ...]:
        """The key and account whose limits apply (known before the verdict)."""
        return self._asked.subjects

    def defer(self) -> None:
        """The verdict is to be awaited by the vendor layer, inside the part of the request its
        client's leaving cancels: read in a task of its own, so that a cancellation never loses an
        answer the store has given (a claim it took would hold its slot for a lease)."""
        if self._verdict is None and self.remote:
            self._verdict = asyncio.ensure_future(self._asked.grant())

    async def go_ahead(self) -> None:
        """What the request's clearance waits on (core/clearance.py): returns once the request may
        reach a vendor, or raises Withheld with the refusal (its ledger row written)."""
        try:
            await self.grant()
        except GatewayError as refusal:
            raise Withheld(refusal) from None

    async def grant(self) -> Grant:
        """The request's grant, or the error that refuses it (its ledger row written once)."""
        grant = self._grant
        if grant is not None:
            return grant
        if self._refusal is not None:
            raise self._refusal
        verdict = self._verdict
        grant = await (asyncio.shield(verdict) if verdict is not None else self._asked.grant())
        if grant.refusal is not None:
            demand = self._demand
            self._meter.refused(demand.model, demand.streamed, demand.user, demand.endpoint)
            observe.current().rate_limited(grant.refusal.kind)  # gateway_rate_limited_total{reason}
            self._refusal = _error(grant, self._key_id, demand.model)
            raise self._refusal
        self._grant = grant
        return grant

    async def failed(self, exc: BaseException) -> tuple[Grant, BaseException]:
        """The grant of a request that failed with `exc`, and the error that answers it: the
        refusal, when the limits refused it (Withheld), or refuse it now that their verdict is
        awaited (a failure before the vendor layer awaited it: a refusal answers even a request
        with a mistake of its own). A client that left waits for nothing (`release`)."""
        if isinstance(exc, Withheld):
            return NO_LIMITS, exc.error
        if self._grant is not None:
            return self._grant, exc
        if self._refusal is not None:  # (`exc` is the refusal)
            return NO_LIMITS, exc
        if isinstance(exc, (asyncio.CancelledError, ClientDisconnected)):
            self.release()
            return NO_LIMITS, exc
        try:
            return await self.grant(), exc
        except GatewayError as refusal:
            return NO_LIMITS, refusal

    def release(self) -> None:
        """The request ended (its client left) with its verdict still on its way: what the store
        grants is given back as soon as its answer comes (a request that reached no vendor)."""
        verdict = self._verdict
        if self._grant is None and verdict is not None:
            verdict.add_done_callback(_give_back)

    def fallbacks(self, chains: Mapping[str, Sequence[str]], model: str) -> Mapping[str, Sequence[str]]:
        """The fallback chains with the models an allow-list refuses left out, and those a budget in
        dollars cannot be kept on (no price)."""
        subjects = self.subjects
        if not subjects or model not in chains:
            return chains
        limiter = self._asked.limiter
        allowed = [m for m in chains[model] if all(
            limits.allows(m) and (limiter is None or limiter.affordable(limits, m)) for _, limits in subjects)]
        return {**chains, model: allowed}


async def admit_call(limiter: Limiter, key_id: str, request_id: str) -> Grant:
    """The grant of a call that reaches no model (an administrative one), under its key's request
    rate and concurrency (Limiter.ask_call), or the error that refuses it. It is settled, with
    nothing used, when the call ends. No ledger row: the ledger is the usage of models."""
    asked = limiter.ask_call(key_id=key_id, request_id=request_id)
    if asked.remote:  # a cancellation must not lose what the store grants (a slot held for a lease)
        verdict = asyncio.ensure_future(asked.grant())
        try:
            grant = await asyncio.shield(verdict)
        except asyncio.CancelledError:
            verdict.add_done_callback(_give_back)
            raise
    else:
        grant = await asked.grant()
    refusal = grant.refusal
    if refusal is not None and refusal.kind in (verdicts.UNSHARED, verdicts.STORE_DOWN):
        # The limits cannot be counted now (several workers without Redis, or Redis away under
        # `closed`): an administrative call is not refused for it. Administration is how an
        # operator mends such a state, and revokes a leaked key during it.
        log.warning("administrative call of key %s served without counting its limits: %s", key_id,
                    "several workers without GATEWAY_REDIS_URL" if refusal.kind == verdicts.UNSHARED
                    else "the limits store is unavailable")
        return NO_LIMITS
    if refusal is not None:
        observe.current().rate_limited(refusal.kind)  # gateway_rate_limited_total{reason}
        raise _error(grant, key_id, "")
    return grant


# Every request's while no limit exists: its grant is known, nothing else of it is read.
UNLIMITED = Check(NO_LIMITS, "", Demand(Endpoint.COMPLETIONS, "", (), 0), None)  # type: ignore[arg-type]


def _give_back(verdict: asyncio.Future[Grant]) -> None:
    if not verdict.cancelled() and verdict.exception() is None:
        verdict.result().settle(None)


def headers(grant: Grant) -> dict[str, str]:
    """x-ratelimit-{limit,remaining,reset}-{requests,tokens} of the tightest per-minute limit that
    applies (OpenAI's names and formats)."""
    windows = grant.windows
    if not windows:
        return {}
    # Per kind, the fewest remaining (then the lowest limit); a Window is (limit, remaining, reset).
    requests = tokens = None
    for (_, kind), w in windows.items():
        if kind == RPM:
            if requests is None or (w[1], w[0]) < (requests[1], requests[0]):
                requests = w
        elif tokens is None or (w[1], w[0]) < (tokens[1], tokens[0]):
            tokens = w
    out = {}
    if requests is not None:
        out |= {"x-ratelimit-limit-requests": str(requests[0]), "x-ratelimit-remaining-requests": str(requests[1]),
                "x-ratelimit-reset-requests": duration(requests[2])}
    if tokens is not None:
        out |= {"x-ratelimit-limit-tokens": str(tokens[0]), "x-ratelimit-remaining-tokens": str(tokens[1]),
                "x-ratelimit-reset-tokens": duration(tokens[2])}
    return out


def duration(seconds: float) -> str:
    """A wait the way OpenAI's headers write it (Go's durations): "20ms", "1s", "8.64s", "6m0s"."""
    ms = max(math.ceil(seconds * 1000), 0)
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    text = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


def _error(grant: Grant, key_id: str, model: str) -> GatewayError:
    refusal = grant.refusal
    assert refusal is not None
    who = _who(refusal.subject, key_id)
    rate = headers(grant)
    wait = None if refusal.retry_after is None else max(math.ceil(refusal.retry_after), 1)
    match refusal.kind:
        case counters.RPM:
            return RateLimited(f"rate limit of {who}: {refusal.limit} requests per minute; retry in "
                               f"{duration(refusal.retry_after or 0)}", code="requests_per_minute", retry_after=wait,
                               headers=rate)
        case counters.TPM:
            return RateLimited(f"rate limit of {who}: {refusal.limit} tokens per minute, and this request may use "
                               f"{refusal.wanted} (prompt + max_tokens x choices); retry in "
                               f"{duration(refusal.retry_after or 0)}", code="tokens_per_minute", retry_after=wait,
                               headers=rate)
        case counters.TOO_LARGE:
            return RequestTooLarge(f"this request may use {refusal.wanted} tokens (prompt + max_tokens x choices), "
                                   f"more than {who}'s limit of {refusal.limit} tokens per minute: lower max_tokens",
                                   code="request_too_large", param="max_tokens", headers=rate)
        case counters.CONCURRENT:
            return RateLimited(f"{who} has {refusal.limit} requests in flight, its limit; retry when one ends",
                               code="concurrent_requests", retry_after=wait, headers=rate)
        case counters.BUDGET:
            show = _unit(grant, refusal).show
            return QuotaExceeded(f"the budget of {who} is spent: {show(refusal.limit)} {_budget(grant, refusal)}; "
                                 f"{show(refusal.used)} used, and this request may use up to {show(refusal.wanted)}",
                                 code="budget_exceeded", headers=rate)
        case counters.BUDGET_IN_FLIGHT:
            show = _unit(grant, refusal).show
            return RateLimited(f"the budget of {who} ({show(refusal.limit)} {_budget(grant, refusal)}) is held by "
                               f"requests in flight: {show(refusal.used)} used, {show(refusal.reserved)} reserved, "
                               f"this request may use up to {show(refusal.wanted)}; retry when they end",
                               code="budget_in_flight", retry_after=wait, headers=rate)
        case verdicts.MODEL:
            patterns = next(limits.models for s, limits in grant.subjects if s == refusal.subject)
            return PermissionDenied(f"model '{clip(model)}' is not allowed for {who} (allowed: "
                                    f"{', '.join(patterns or ())})", code="model_not_allowed", param="model")
        case verdicts.UNPRICED:
            return PermissionDenied(f"model '{clip(model)}' has no price, so the budget in dollars of {who} cannot "
                                    "be kept on it: give it one in [prices] (docs/usage.md)", code="model_unpriced",
                                    param="model")
        case verdicts.UNSHARED:
            return LimitsUnavailable(f"{who} has limits this gateway cannot count exactly: it serves several workers "
                                     "without GATEWAY_REDIS_URL (the operator must set it, or serve one worker)",
                                     code="limits_unenforceable")
        case verdicts.STORE_DOWN:
            return LimitsUnavailable(f"the store that counts the limits of {who} is unavailable; retry shortly",
                                     code="limits_store_unavailable", retry_after=1)
    raise AssertionError(f"unknown refusal {refusal.kind}")


def _who(subject: Subject, key_id: str) -> str:
    # (A key's subject is the key's, or its lineage's: its rotation chain counts as one.)
    return f"key {key_id}" if subject.kind == "key" else f"account {subject.id} (key {key_id})"


def _budget(grant: Grant, refusal: counters.Refusal) -> str:
    budget = _budget_of(grant, refusal)
    return f"{budget.unit.after.lstrip()} per {budget.period} (UTC)".lstrip()


def _unit(grant: Grant, refusal: counters.Refusal) -> Unit:
    return _budget_of(grant, refusal).unit


def _budget_of(grant: Grant, refusal: counters.Refusal) -> Budget:
    limits = next(limits for s, limits in grant.subjects if s == refusal.subject)
    return next((b for b in limits.budgets if b.unit.name == refusal.unit), limits.budgets[0])
