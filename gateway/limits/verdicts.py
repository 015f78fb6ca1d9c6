"""What the limits decided on a request (limits/limiter.py decides): a `Grant`, which lets it through
(to be settled once it ends) or refuses it, or an `Asking`, a verdict on its way from a shared store,
awaited with `grant()`. A refusal's kind is one of the counters' (limits/counters.py: RPM, TPM,
BUDGET...) or one of the limiter's own, below."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.limits.applicable import Applicable
from gateway.limits.counters import Claim, Refusal, Verdict, Window
from gateway.limits.rules import Limits, Period, Subject
from gateway.store.meter import CACHE_HIT

if TYPE_CHECKING:
    from gateway.limits.limiter import Limiter

MODEL = "model"  # a refusal's kind: the model is outside an allow-list
UNPRICED = "unpriced"  # ... a budget in dollars applies and the model has no price
UNSHARED = "unshared"  # ... counted limits that several workers without Redis cannot count
STORE_DOWN = "store_down"  # ... the counters' store is away and the policy is `closed`


@dataclass(slots=True)
class Grant:
    """What the limits decided. A request that is let through settles its grant once, when it ends."""

    limiter: Limiter | None = None
    claim: Claim | None = None
    windows: dict[tuple[Subject, str], Window] = field(default_factory=dict)
    refusal: Refusal | None = None
    subjects: tuple[tuple[Subject, Limits], ...] = ()  # the subjects whose limits applied
    settled: bool = False

    # The verdict's interface, shared with `Asking` (a verdict on its way): this one is here already.
    remote = False

    async def grant(self) -> Grant:
        return self

    def settle(self, row: Mapping[str, Any] | None) -> None:
        """The request ended; `row` is its ledger row (None: it reached no vendor, used nothing)."""
        if self.settled or self.claim is None or self.limiter is None:
            return
        self.settled = True
        claim = self.claim
        tokens = int(row.get("total_tokens") or 0) if row and row.get("outcome") != CACHE_HIT else 0
        spent = {b.counter: b.budget.unit.used(row) if row else 0 for charge in claim.charges for b in charge.budgets}
        self.limiter.settle(claim, tokens, spent)


NO_LIMITS = Grant()


@dataclass(slots=True, eq=False)
class Asking:
    """A claim the store has been asked to take (`Limiter.ask`): its verdict is on its way, and
    `grant()` awaits it. Awaited once, always (until then the claim may hold a slot)."""

    limiter: Limiter
    applicable: Applicable
    claim: Claim
    periods: list[Period]
    now: float
    verdict: Awaitable[Verdict]

    @property
    def remote(self) -> bool:
        """Whether the verdict comes from a shared store (a round trip, not this process's memory)."""
        return self.limiter.counters.remote  # type: ignore[union-attr]

    @property
    def subjects(self) -> tuple[tuple[Subject, Limits], ...]:
        """The key and account whose limits apply (known before the verdict)."""
        return self.applicable.found

    async def grant(self) -> Grant:
        return await self.limiter.granted(self)
