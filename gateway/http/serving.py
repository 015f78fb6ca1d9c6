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
from gateway.http import event_stream
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
                answer: Answer[P]) -> Response:
    """Serve the request for model `requested`, planned by `plan_for(model)` (on a fallback too)."""
    try:
        plan = plan_for(requested)
        chains = life.fallbacks(request.services.settings.fallbacks, requested)
        started = await life.call(answer.vendor_calls(plan), lambda: fallbacks.start(
            plan, requested, plan_for, chains, on_attempt=life.meter.trying))
        plan = started.plan
        models = {"x-gateway-model": plan.model}
        if plan.model != requested:
            models["x-gateway-fallback-from"] = requested
        headers = life.headers(models)
        if started.result is None:
            assert started.first is not None and started.rest is not None
            return life.stream(answer.stream(plan, started.first, started.rest, life), headers)
        result = started.result
        usage = result.usage or await life.estimated_usage(plan.prompts, answer.echoed(plan), result.choices)
        if usage.estimated:
            headers["x-gateway-usage-estimated"] = "true"
        return life.answer(orjson.dumps(answer.body(plan, result, usage)), headers, result.billed, result.choices)
    except BaseException as exc:
        await life.fail(exc)
