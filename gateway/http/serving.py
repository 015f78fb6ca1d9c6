"""A request that calls vendors, served the one way every such endpoint serves it: planned on its
model, started (on a fallback when the model fails), answered whole or streamed, all under the
request's lifecycle (http/lifecycle.py), which anything raised on the way goes to. What differs
between endpoints is only how a plan is made and how its answer is written (`Answer`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

import orjson
from starlette.responses import Response

from gateway.core.completion import Chunk, Result, Usage
from gateway.http import cache, event_stream
from gateway.http.cache_relay import Relay
from gateway.http.context import HandlerRequest
from gateway.http.lifecycle import Lifecycle
from gateway.planner import fallbacks
from gateway.planner.fallbacks import Startable


class Planned(Startable, Protocol):
    model: str  # as the client wrote it, or the fallback's
    prompts: list[str]  # what an estimate of the prompt's tokens counts


P = TypeVar("P", bound=Planned)


class Answer(Protocol[P]):  # type: ignore[misc]
    """How an endpoint writes the answer of its plans."""

    def vendor_calls(self, plan: P) -> int: ...

    def echoed(self, plan: P) -> Callable[[int], str]:
        """What choice `index` starts with that is not its own generated text."""

    def body(self, plan: P, result: Result, usage: Usage) -> dict[str, Any]: ...

    def stream(self, plan: P, first: list[Chunk], rest: AsyncIterator[list[Chunk]],
               life: Lifecycle) -> event_stream.EventSource: ...


async def serve(request: HandlerRequest, life: Lifecycle, requested: str, plan_for: Callable[[str], P],
                answer: Answer[P], looked: cache.Lookup = cache.BYPASSED) -> Response:
    """Serve the request for model `requested`, planned by `plan_for(model)` (on a fallback too):
    from the response cache when `looked` found its answer there, else from a vendor (its answer
    kept in the cache where `looked` says)."""
    try:
        plan = plan_for(requested)
        if looked.entry is not None:
            return await _from_cache(life, plan, answer, looked)
        looked.refuse()  # only-if-cached, and nothing there
        chains = life.fallbacks(request.services.settings.fallbacks, requested)
        started = await life.call(answer.vendor_calls(plan), lambda: fallbacks.start(
            plan, requested, plan_for, chains, on_attempt=life.meter.trying))
        plan = started.plan
        models = {"x-gateway-model": plan.model}
        if plan.model != requested:
            models["x-gateway-fallback-from"] = requested
        headers = life.headers(models | looked.header())
        if started.result is None:
            assert started.first is not None and started.rest is not None
            rest = started.rest if looked.key is None else Relay(started.first, started.rest, plan.model, looked)
            return life.stream(answer.stream(plan, started.first, rest, life), headers)
        result = started.result
        usage = result.usage or await life.estimated_usage(plan.prompts, answer.echoed(plan), result.choices)
        if usage.estimated:
            headers["x-gateway-usage-estimated"] = "true"
        body = orjson.dumps(answer.body(plan, result, usage))
        if looked.key is not None and cache.storable(result.choices, result.usage):
            await looked.keep(plan.model, cache.Entry(result.choices, usage, result.system_fingerprint))
        return life.answer(body, headers, result.billed, result.choices)
    except BaseException as exc:
        await life.fail(exc)


async def _from_cache(life: Lifecycle, plan: P, answer: Answer[P], looked: cache.Lookup) -> Response:
    """A hit: the entry's answer written as this request asks it (whole or streamed, its own id and
    created), under the limits (a request, no tokens) and recorded as a cache hit."""
    entry = looked.entry
    assert entry is not None
    await life.from_cache(plan.attempt())
    headers = life.headers({"x-gateway-model": plan.model} | looked.header())
    if plan.stream:
        return life.stream(answer.stream(plan, cache.chunks(entry), cache.NO_MORE(), life), headers)
    result = Result(entry.choices, entry.usage, entry.system_fingerprint, billed=entry.usage)
    return life.answer(orjson.dumps(answer.body(plan, result, entry.usage)), headers, entry.usage, entry.choices)
