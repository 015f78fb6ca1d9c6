"""Limits on the request path: `Limiter.ask` before a request reaches a vendor (`ask_call` for a
call that reaches none, an administrative one), the store asked at once and its verdict,
`Asking.grant()`, awaited later (limits/on_request.py `Check`); `Grant.settle` when it has ended
(completed, failed, cut short or left), with its ledger row (the verdicts: limits/verdicts.py).

What it takes from a request: the model (for allow-lists) and an estimate of its tokens, the
prompts' tokens plus `max_tokens` x choices (OpenAI's rule), which a per-minute token limit and a
budget reserve until settlement replaces it with what the request used.

Where the counters live (limits/counters.py): with `redis_url`, in Redis, shared exactly by
every worker and host; without it, in this process's memory, exact for one process. With several
workers and no Redis they could only be per process, which no limit means: such a gateway refuses
to start while limits exist, and a limit set later is refused per request (503) and logged, never
counted per process. (Allow-lists need no counter and are always enforced.)

When Redis cannot be reached, `limits_on_store_failure` decides: `open` serves requests under
limits uncounted (their usage is charged once Redis answers again), `closed` refuses them (503).
Either way it is logged and /readyz says degraded. A request with no limits never waits for Redis.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.core.errors import ConfigError
from gateway.limits.applicable import Applicable, KnownPairs
from gateway.limits.counters import BudgetClaim, Charge, Claim, Counters, Refusal, settled
from gateway.limits.ledger_sums import consumed, consumed_since
from gateway.limits.rules import Limits, Subject
from gateway.limits.table import LimitsTable
from gateway.limits.verdicts import MODEL, NO_LIMITS, STORE_DOWN, UNPRICED, UNSHARED, Asking, Grant
from gateway.store.prices import Prices

log = logging.getLogger("gateway.limits")

RETRY_STORE = 1.0  # seconds between attempts to reach a store that failed
TICK = 1.0  # seconds between the housekeeping rounds (replaying settlements, renewing leases)
MAX_UNSETTLED = 100_000  # settlements kept while the store is away; beyond, the oldest are dropped

Settlement = tuple[Claim, int, dict[str, int]]  # a claim, the tokens its request used, and what it spent per budget


class Limiter:
    def __init__(self, table: LimitsTable, counters: Counters | None, engine: AsyncEngine, *, policy: str = "open",
                 workers: int = 1, clock: Callable[[], float] | None = None, prices: Prices | None = None,
                 retry_store: float = RETRY_STORE, tick: float = TICK) -> None:
        """`retry_store` and `tick` (seconds): how soon a store that failed is tried again, and how
        often the housekeeping looks (a test of a store's outage sets its own)."""
        self.table = table
        self.prices = prices  # what a budget in dollars reserves and settles by (store/prices.py)
        self.counters = counters  # None: several workers without Redis (nothing can be counted exactly)
        self._engine = engine
        self._policy = policy
        self._workers = workers
        self._clock = clock or wall_clock
        self._retry_store, self._tick = retry_store, tick
        self._live: dict[str, Claim] = {}  # claims taken and not yet settled (their leases are renewed)
        self._unsettled: deque[Settlement] = deque(maxlen=MAX_UNSETTLED)
        self._sending = 0  # settlements the store has not answered yet
        self._drained: asyncio.Future[None] | None = None  # `drain` waits for them
        self._pairs = KnownPairs()
        self._down_since: float | None = None
        self._retry_at = 0.0
        self._failure = ""
        self._housekeeper: asyncio.Task[None] | None = None
        table.on_change = self._changed

    # -- life ------------------------------------------------------------------------------
    async def start(self, strict: bool = True) -> None:
        """Load the limits. `strict`, a gateway that starts refuses limits it cannot count (a
        ConfigError); else (a worker joining a gateway that serves already) they are logged and
        refused per request, as a limit set while the gateway runs is."""
        await self.table.load()
        if self.counters is None and (counted := self._uncountable()):
            if strict:
                raise ConfigError(f"{self._why_uncountable()}; limits exist for {', '.join(map(str, counted[:5]))}"
                                  f"{' and more' if len(counted) > 5 else ''}. Set GATEWAY_REDIS_URL, or serve one "
                                  "worker")
            self._changed(self.table.subjects)
        self.table.start()
        if self.counters is not None:
            self._housekeeper = asyncio.create_task(self._housekeeping(), name="limits-housekeeping")

    async def close(self) -> None:
        await self.drain()
        if self._housekeeper is not None:
            self._housekeeper.cancel()
            await asyncio.gather(self._housekeeper, return_exceptions=True)
        await self._replay()
        await self.table.close()
        if self.counters is not None:
            await self.counters.close()

    def not_ready(self) -> str | None:
        """None while limits are counted as configured, else what is wrong (shown by /readyz)."""
        if self._down_since is not None:
            handling = ("served uncounted, charged when it is back" if self._policy == "open" else "refused (503)")
            return (f"limits store unavailable for {time.monotonic() - self._down_since:.0f}s ({self._failure}); "
                    f"requests under limits are {handling}; {len(self._unsettled)} settlements waiting")
        if self.counters is None and (counted := self._uncountable()):
            return f"{self._why_uncountable()}: requests of {len(counted)} limited keys or accounts are refused"
        return None

    def _uncountable(self) -> list[Subject]:
        return [s for s, limits in self.table.subjects.items() if limits.counted_at(time.time())]

    def _why_uncountable(self) -> str:
        return f"{self._workers} workers without GATEWAY_REDIS_URL cannot count limits exactly (each would count alone)"

    def _changed(self, subjects: dict[Subject, Limits]) -> None:
        if self.counters is None and (counted := self._uncountable()):
            log.error("%s: requests of %s are refused until GATEWAY_REDIS_URL is set or the gateway serves one worker",
                      self._why_uncountable(), ", ".join(map(str, counted[:20])))

    # -- the request path ------------------------------------------------------------------
    def affordable(self, limits: Limits, model: str) -> bool:
        """Whether every budget of `limits` can be kept on `model` (one in dollars needs its price)."""
        return all(b.unit.reserve(self.prices, model, 0, 0) is not None for b in limits.budgets)

    def ask(self, *, key_id: str, account: str, model: str, prompt_tokens: int, completion_tokens: int,
            request_id: str, hit_share: float | None = None) -> Grant | Asking:
        """The verdict on a request: a Grant when it needs no store, else the store's answer on
        its way (`Asking.grant()`; a shared store has been written to when this returns). A cache
        hit (`hit_share`: of its tokens' price, billed) reserves no tokens, and what it is billed."""
        table = self.table.subjects
        if not table:
            return NO_LIMITS
        applicable = self._pairs.get(table, key_id, account)
        if applicable is None:
            return NO_LIMITS
        if applicable.listed and (refusing := applicable.refusing(model)) is not None:
            return Grant(refusal=Refusal(refusing, MODEL, 0), subjects=applicable.found)
        return self._claim(applicable, model, prompt_tokens, completion_tokens, request_id, hit_share)

    def budgeted(self, key_id: str, account: str, model: str) -> bool:
        """Whether a budget (of tokens or dollars) applies to the key or its account on `model`: a
        request must then say the most it may generate (core/demand.py `Demand.unbounded`). Not on a
        model an allow-list refuses: that refusal (`ask`) answers first."""
        table = self.table.subjects
        applicable = self._pairs.get(table, key_id, account) if table else None
        if applicable is None or (applicable.listed and applicable.refusing(model) is not None):
            return False
        return any(limits.budgets for _, limits in applicable.counted)

    def ask_call(self, *, key_id: str, request_id: str) -> Grant | Asking:
        """The verdict on a call that reaches no model, an administrative one (Applicable.of_calls)."""
        applicable = Applicable.of_calls(self.table.subjects, key_id)
        return NO_LIMITS if applicable is None else self._claim(applicable, "", 0, 0, request_id)

    def _claim(self, applicable: Applicable, model: str, prompt: int, completion: int, request_id: str,
               hit_share: float | None = None) -> Grant | Asking:
        found = applicable.found
        if not applicable.counted:
            return Grant(subjects=found)
        if self.counters is None:
            return Grant(refusal=Refusal(applicable.counted[0][0], UNSHARED, 0), subjects=found)
        now = self.counters.time(self._clock())  # the store's clock: periods are the store's
        charges, periods = [], []
        for subject, limits in applicable.counted:
            budgets = []
            for budget in limits.budgets:
                reserve = budget.unit.reserved(self.prices, model, prompt, completion, hit_share)
                if reserve is None:  # a budget in dollars, and no price: it could not be kept
                    return Grant(refusal=Refusal(subject, UNPRICED, budget.limit, unit=budget.unit.name),
                                 subjects=found)
                period = budget.period_at(now)
                periods.append(period)
                budgets.append(BudgetClaim(budget, period, reserve))
            charges.append(Charge(subject, limits, budgets))
        claim = Claim(request_id, 0 if hit_share is not None else prompt + completion, charges)
        if self._down_since is not None and time.monotonic() < self._retry_at:
            return self._without_store(claim, found)
        prepared = applicable.prepared
        if prepared is not None and prepared[0] == periods:  # the same counters as the last claim of this pair
            claim.prepared = prepared[1]
        try:
            verdict = self.counters.acquire(claim, now)
        except Exception as exc:
            self._failed(exc)
            return self._without_store(claim, found)
        return Asking(self, applicable, claim, periods, now, verdict)

    async def granted(self, asking: Asking) -> Grant:
        """The verdict on `asking`, awaited (Asking.grant)."""
        applicable, claim, found = asking.applicable, asking.claim, asking.applicable.found
        assert self.counters is not None
        try:
            verdict = await asking.verdict
            applicable.prepared = (asking.periods, claim.prepared)
            # A counter new to the store starts from the ledger (it may expire meanwhile); a claim
            # made in periods that are not the store's (this host's clock is off) is made again.
            for _ in range(3):
                if verdict.clock is not None:
                    claim.prepared = None
                    for charge in claim.charges:
                        for b in charge.budgets:
                            b.period, b.seed, b.seeded = b.budget.period_at(verdict.clock), None, None
                            b.recent, b.recent_tag = {}, None
                elif verdict.unseeded:
                    await self._seed(claim, verdict.unseeded)
                else:
                    break
                verdict = await self.counters.acquire(claim, asking.now)
        except Exception as exc:
            self._failed(exc)
            if self._policy == "closed" and any(charge.settles for charge in claim.charges):
                # The store may have taken it and its answer been lost: given back once it is back.
                self._keep((claim, 0, {}))
            return self._without_store(claim, found)
        if self._down_since is not None:
            self._back()
        if verdict.refusal is not None:
            return Grant(windows=verdict.windows, refusal=verdict.refusal, subjects=found)
        if not applicable.settles:
            return Grant(windows=verdict.windows, subjects=found)  # nothing to settle: no second round trip
        self._live[claim.request_id] = claim
        return Grant(self, claim, verdict.windows, subjects=found)

    def _without_store(self, claim: Claim, found: tuple[tuple[Subject, Limits], ...]) -> Grant:
        if self._policy == "closed":
            return Grant(refusal=Refusal(claim.charges[0].subject, STORE_DOWN, 0), subjects=found)
        if not any(charge.settles for charge in claim.charges):
            return Grant(subjects=found)
        # Served uncounted; what it uses is charged once the store is back. The claim goes with it
        # as it was asked for: if the store took it after all, its settlement gives back what it
        # reserved; if not, the store knows it holds nothing of it (redis_scripts.py).
        return Grant(self, claim, subjects=found)

    def settle(self, claim: Claim, tokens: int, spent: dict[str, int]) -> None:
        """Sent to the store at once, without a task: a shared store's settlement is on its way
        before the request's answer is (so a client that has its answer finds its slot free), and
        Redis has it in the order this process sent it, before any later claim from here."""
        self._live.pop(claim.request_id, None)
        claim.ended = self.counters.time(self._clock()) if self.counters is not None else None
        settlement = (claim, tokens, spent)
        assert self.counters is not None
        if self._down_since is not None and time.monotonic() < self._retry_at:
            self._keep(settlement)
            return

        def heard(failure: BaseException | None) -> None:
            self._sending -= 1
            if failure is None:
                if self._down_since is not None:
                    self._back()
            else:
                self._failed(failure)
                self._keep(settlement)
            if not self._sending and self._drained is not None:
                self._drained.set_result(None)
                self._drained = None

        self._sending += 1
        try:
            self.counters.settle(claim, tokens, spent, self._clock(), heard)
        except Exception as exc:
            heard(exc)

    def _keep(self, settlement: Settlement) -> None:
        """A settlement the store missed: replayed once it answers again."""
        if len(self._unsettled) == self._unsettled.maxlen:
            log.error("limits: %d settlements wait for the store; the oldest is dropped", len(self._unsettled))
        self._unsettled.append(settlement)

    async def drain(self) -> None:
        """Until the settlements sent have been answered (or have failed, and wait for a replay)."""
        if self._sending:
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drained)

    async def _seed(self, claim: Claim, unseeded: list[BudgetClaim]) -> None:
        assert self.counters is not None
        for charge in claim.charges:
            for b in charge.budgets:
                if any(b is u for u in unseeded):
                    # One moment on both clocks, SEED_LAG ago: the rows of requests that ended
                    # before it (all committed by now) are the seed, and settlements of those add
                    # nothing to it; the rows since are told by id, each counted by its row or by
                    # its settlement, whichever the store had first (redis_scripts.py).
                    b.seeded = self.counters.time(self._clock()) - SEED_LAG
                    since = datetime.now(UTC) - timedelta(seconds=SEED_LAG)  # the ledger's clock
                    b.seed = await consumed(self._engine, charge.subject, b.budget.unit, b.period, since)
                    b.recent = await consumed_since(self._engine, charge.subject, b.budget.unit, b.period, since)

    # -- the store's health ----------------------------------------------------------------
    def _failed(self, exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.error("limits store unavailable (%s): requests under limits are %s", reason,
                      "served uncounted (limits_on_store_failure=open)" if self._policy == "open"
                      else "refused with 503 (limits_on_store_failure=closed)")
        self._failure = reason
        self._retry_at = time.monotonic() + self._retry_store

    def _back(self) -> None:
        if self._down_since is not None:
            log.warning("limits store answers again after %.1fs; %d settlements to replay",
                        time.monotonic() - self._down_since, len(self._unsettled))
            self._down_since = None

    async def _replay(self) -> None:
        while self._unsettled and self.counters is not None:
            claim, tokens, spent = self._unsettled[0]
            try:
                await settled(self.counters, claim, tokens, spent, self._clock())
            except Exception as exc:
                self._failed(exc)
                return
            self._unsettled.popleft()
            self._back()

    async def _housekeeping(self) -> None:
        """Settlements the store missed are replayed once it answers; the leases of requests in
        flight are renewed, so that the store knows this process is alive."""
        assert self.counters is not None
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self._tick)
            if self._down_since is not None:  # is it back? (readiness need not wait for a request)
                if time.monotonic() < self._retry_at:
                    continue
                try:
                    await self.counters.ping()
                except Exception as exc:
                    self._failed(exc)
                    continue
                self._back()
            await self._replay()
            if self._live and time.monotonic() - renewed >= RENEW_EVERY and self._down_since is None:
                try:
                    await self.counters.renew(list(self._live.values()), self._clock())
                    renewed = time.monotonic()
                except Exception as exc:
                    self._failed(exc)


RENEW_EVERY = 20.0  # seconds; a third of a shared store's lease (redis_counters.LEASE_SECONDS)
SEED_LAG = 2.0  # seconds a ledger row may take from its request's end to its commit (docs/limits.md)


def wall_clock() -> float:
    """The limits' clock: seconds since the epoch (per-minute buckets, UTC budget periods)."""
    return time.time()
