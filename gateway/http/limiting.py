"""Limits as a completion request meets them (gateway/store/limiter.py does the counting): the
request's estimate, the answer to a refusal, and OpenAI's x-ratelimit-* headers.

A refused request reaches no vendor and is billed nothing; its ledger row (outcome `refused`, no
tokens) is what the usage report counts. One that is let through settles its grant when its meter
closes, with the row's real usage (also when it failed, was cut short or its client left).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pydantic import MISSING

from gateway.core import observe
from gateway.core.completion import DEFAULT_MAX_TOKENS, rough_tokens
from gateway.core.errors import (
    GatewayError,
    LimitsUnavailable,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    RequestTooLarge,
    clip,
)
from gateway.store import counters
from gateway.store.counters import RPM
from gateway.store import limiter as limits_on_path
from gateway.store.limiter import NO_LIMITS, Asking, Grant, Limiter
from gateway.store.limits import Budget, Subject, Unit
from gateway.store.meter import Meter
from generated.models import CompletionRequest

__all__ = ["NO_LIMITS", "Check", "check", "fallbacks", "headers"]


def estimate(request: CompletionRequest) -> tuple[int, int]:
    """(prompt tokens, completion tokens) a request may use at most, by OpenAI's rule for rate
    limits: the prompts' characters / 4, plus max_tokens for every choice it generates."""
    prompt = request.prompt
    prompts = [prompt] if isinstance(prompt, str) else list(prompt.root)
    max_tokens = _value(request.max_tokens, DEFAULT_MAX_TOKENS)
    choices = max(_value(request.n, 1), _value(request.best_of, 1))
    return sum(rough_tokens(len(p)) for p in prompts), max_tokens * choices * len(prompts)


def check(limiter: Limiter, *, key_id: str, account: str, request: CompletionRequest, request_id: str,
          meter: Meter) -> Check:
    """The limits' verdict on the request, asked for now and awaited with `Check.grant()`."""
    if not limiter.table.subjects:
        return Check(NO_LIMITS, key_id, request, meter)
    prompt, completion = estimate(request)
    return Check(limiter.ask(key_id=key_id, account=account, model=request.model, prompt_tokens=prompt,
                             completion_tokens=completion, request_id=request_id), key_id, request, meter)


class Check:
    """A request's limits check, begun before the request is planned and awaited before any vendor
    is called: a shared store works on it meanwhile (the round trip to Redis and the planning
    overlap). Awaited once, on every way a request takes (until then it may hold a claim)."""

    __slots__ = ("_asked", "_key_id", "_request", "_meter")

    def __init__(self, asked: Grant | Asking, key_id: str, request: CompletionRequest, meter: Meter) -> None:
        self._asked, self._key_id, self._request, self._meter = asked, key_id, request, meter

    async def grant(self) -> Grant:
        """The request's grant, or the error that refuses it (its ledger row written)."""
        asked = self._asked
        grant = asked if asked.__class__ is Grant else await asked.grant()  # type: ignore[union-attr]
        if grant is NO_LIMITS:
            return grant
        request = self._request
        if grant.refusal is not None:
            self._meter.refused(request.model, bool(_value(request.stream, False)), _value(request.user, None))
            observe.current().rate_limited(grant.refusal.kind)  # gateway_rate_limited_total{reason}
            raise _error(grant, self._key_id, request.model)
        self._meter.on_close = grant.settle
        return grant


def fallbacks(grant: Grant, chains: Mapping[str, Sequence[str]], model: str) -> Mapping[str, Sequence[str]]:
    """The fallback chains with the models an allow-list refuses left out, and those a budget in
    dollars cannot be kept on (no price)."""
    if not grant.subjects or model not in chains:
        return chains
    limiter = grant.limiter
    allowed = [m for m in chains[model] if all(
        limits.allows(m) and (limiter is None or limiter.affordable(limits, m)) for _, limits in grant.subjects)]
    return {**chains, model: allowed}


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
        case limits_on_path.MODEL:
            patterns = next(limits.models for s, limits in grant.subjects if s == refusal.subject)
            return PermissionDenied(f"model '{clip(model)}' is not allowed for {who} (allowed: "
                                    f"{', '.join(patterns or ())})", code="model_not_allowed", param="model")
        case limits_on_path.UNPRICED:
            return PermissionDenied(f"model '{clip(model)}' has no price, so the budget in dollars of {who} cannot "
                                    "be kept on it: give it one in [prices] (docs/usage.md)", code="model_unpriced",
                                    param="model")
        case limits_on_path.UNSHARED:
            return LimitsUnavailable(f"{who} has limits this gateway cannot count exactly: it serves several workers "
                                     "without GATEWAY_REDIS_URL (the operator must set it, or serve one worker)",
                                     code="limits_unenforceable")
        case limits_on_path.STORE_DOWN:
            return LimitsUnavailable(f"the store that counts the limits of {who} is unavailable; retry shortly",
                                     code="limits_store_unavailable", retry_after=1)
    raise AssertionError(f"unknown refusal {refusal.kind}")


def _who(subject: Subject, key_id: str) -> str:
    return f"key {key_id}" if subject.id == key_id and subject.kind == "key" else f"account {subject.id} (key {key_id})"


def _budget(grant: Grant, refusal: counters.Refusal) -> str:
    budget = _budget_of(grant, refusal)
    return f"{budget.unit.name} per {budget.period} (UTC)"


def _unit(grant: Grant, refusal: counters.Refusal) -> Unit:
    return _budget_of(grant, refusal).unit


def _budget_of(grant: Grant, refusal: counters.Refusal) -> Budget:
    limits = next(limits for s, limits in grant.subjects if s == refusal.subject)
    return next((b for b in limits.budgets if b.unit.name == refusal.unit), limits.budgets[0])


def _value(value, default):
    return default if value is MISSING or value is None else value

