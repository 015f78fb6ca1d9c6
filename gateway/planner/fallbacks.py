"""Starting a request on its model, or on the configured fallbacks in turn.

When the model fails in a way another vendor can help with (429, 5xx, timeouts), the next model of
its chain that can serve the request is tried. A fallback that cannot serve it (a parameter it
lacks, its own failure) is skipped; when none serves, the client gets the first model's error. A
client mistake (a 4xx of the request itself) never falls back: another vendor would not help.

Nothing reached the client yet: a stream's headers wait for its first chunk, so a fallback is
invisible but for the x-gateway-* headers and the `model` of the answer.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from gateway.core import observe
from gateway.core.completion import Attempt, Chunk, Result
from gateway.core.errors import GatewayError

log = logging.getLogger("gateway")


class Startable(Protocol):
    """A planned request (planner/plan.py Plan)."""

    model: str

    @property
    def stream(self) -> bool: ...

    def attempt(self) -> Attempt: ...

    async def complete(self) -> Result: ...

    def chunks(self) -> AsyncIterator[list[Chunk]]: ...


P = TypeVar("P", bound=Startable)
P_co = TypeVar("P_co", bound=Startable, covariant=True)


class Replans(Protocol[P_co]):
    """The request as its endpoint plans it on another model (endpoints/unit.py Planning)."""

    def plan(self, model: str) -> P_co: ...


@dataclass(slots=True)
class Started(Generic[P]):
    """A vendor call that has begun to answer: a whole result, or a stream's first chunks (those
    of its first read)."""

    plan: P
    result: Result | None = None
    first: list[Chunk] | None = None
    rest: AsyncIterator[list[Chunk]] | None = None

    async def aclose(self) -> None:
        """Let go of the vendor stream a stream's start holds (nothing to do for a whole result)."""
        if self.rest is not None:
            await self.rest.aclose()  # type: ignore[attr-defined]


def chain(model: str, fallbacks: Mapping[str, Sequence[str]]) -> list[str]:
    """The models to try for `model`, in order."""
    return [model, *fallbacks.get(model, ())]


async def start(plan: P, planning: Replans[P], fallbacks: Mapping[str, Sequence[str]],
                on_attempt: Callable[[Attempt], None]) -> Started[P]:
    """Start the request, planned as `plan` on the model it asks for (a request that cannot be
    served as the client wrote it is the client's mistake, no fallback), falling back along its
    model's chain, each fallback planned by `planning.plan(model)`. `on_attempt` hears of each model tried
    before its vendor is called (the ledger's row names the one that answered, or the last one tried)."""
    requested = plan.model
    models = chain(requested, fallbacks)
    first_error: GatewayError | None = None
    for number, model in enumerate(models):
        if number:
            try:
                plan = planning.plan(model)
            except GatewayError:
                log.info("fallback %s cannot serve this request; skipped", model)
                continue
            observe.current().fallback(requested, model)
        on_attempt(plan.attempt())
        try:
            return await _begin(plan)
        except GatewayError as exc:
            if first_error is None:  # the model the client asked for
                if exc.status < 500 and exc.status != 429:
                    raise  # the request's fault, not the vendor's: another vendor would not help
                first_error = exc
            log.warning("model %s failed (%s)%s", model, exc.message,
                        "; trying a fallback" if model != models[-1] else "")
    assert first_error is not None
    raise first_error


async def _begin(plan: P) -> Started[P]:
    if not plan.stream:
        return Started(plan, result=await plan.complete())
    chunks = plan.chunks()
    try:
        return Started(plan, first=await anext(chunks), rest=chunks)
    except BaseException:
        await chunks.aclose()
        raise
