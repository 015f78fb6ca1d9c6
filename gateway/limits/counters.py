"""The counters behind limits: a request's claim on them (`Claim`), their verdict (`Verdict`), the
interface of a store of them (`Counters`) and the buckets' arithmetic. The stores: this process's
memory (limits/memory_counters.py) and Redis, shared (limits/redis_counters.py), with the same
semantics, tested alike.

- Requests and tokens per minute are token buckets (as OpenAI's are): a bucket holds up to the
  limit, refills at limit/60 per second, and a request takes 1 (requests) or its estimated tokens
  (tokens) from it. Settling gives back what the estimate overstated, or takes what it missed (a
  bucket may go below zero; it refills from there).
- Requests in flight are leases, released at settlement. A shared store's leases expire unless
  renewed (`renew`), so a process that dies frees its slots.
- A budget counts `used` (settled) and `reserved` (in flight) per subject, unit and calendar
  period. A request is refused when used + its reservation would pass the limit (spent: no retry
  helps) or when requests in flight might (retry shortly). A counter starts from the period's
  consumption in the ledger (`seed`), so budgets survive a restart of the gateway or of Redis.

Every check of a claim is atomic: either every counter of every subject takes its part, or none.
Time is the caller's clock (seconds) here, so tests move it; Redis counts by its own (`time`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from gateway.limits.rules import Budget, Limits, Period, Subject

REFILL_SECONDS = 60.0  # a per-minute bucket refills completely in this long
RETRY_IN_FLIGHT = 1.0  # seconds a client is asked to wait for requests in flight to finish

# Why a claim was refused.
RPM, TPM, TOO_LARGE, CONCURRENT, BUDGET, BUDGET_IN_FLIGHT = (
    "rpm", "tpm", "tpm_too_large", "concurrent", "budget", "budget_in_flight")
FINAL = (TOO_LARGE, BUDGET)  # a retry cannot help (until the period ends or the limit changes)


@dataclass(slots=True)
class BudgetClaim:
    budget: Budget
    period: Period
    reserve: int  # in the budget's unit
    seed: int | None = None  # the period's consumption so far (from the ledger), for a new counter
    seeded: float | None = None  # the moment (the store's clock) until which the seed holds every ledger row
    # The ledger's rows of requests that ended since `seeded`, by request id: part of the seed
    # unless their settlement has counted them already (limiter._seed).
    recent: dict[str, int] = field(default_factory=dict)
    # Where a shared store was given `recent` for this claim alone (redis_counters.py): another
    # process seeding the same counter at the same time writes its own, and cannot touch it.
    recent_tag: str | None = None

    @property
    def counter(self) -> str:
        return f"{self.budget.unit.name}:{self.period.id}"


@dataclass(slots=True)
class Charge:
    """One subject's part of a claim."""

    subject: Subject
    limits: Limits
    budgets: list[BudgetClaim] = field(default_factory=list)

    @property
    def leased(self) -> bool:
        return leases(self.limits)

    @property
    def settles(self) -> bool:
        return settles(self.limits)


def leases(limits: Limits) -> bool:
    """Whether a request under `limits` holds a lease while in flight."""
    return bool(limits.concurrent or limits.budgets)


def settles(limits: Limits) -> bool:
    """Whether counters of `limits` change when a request ends (requests per minute alone do not)."""
    return bool(limits.tpm or leases(limits))


@dataclass(slots=True)
class Claim:
    request_id: str
    tokens: int  # the estimate: prompt tokens + max_tokens x choices
    charges: list[Charge]
    # What a store made of the claim for its check (redis_counters: the calls, encoded), kept for
    # the settlement: the same subjects, limits and periods, not worked out a second time.
    prepared: object = None
    ended: float | None = None  # when its request ended (the store's clock), told with its settlement


class Window(NamedTuple):  # a tuple: made on every request, in C (a frozen dataclass sets each field in Python)
    """A per-minute limit as the x-ratelimit-* headers tell it."""

    limit: int
    remaining: int
    reset: float  # seconds until the bucket is full again


_new_window = tuple.__new__


@dataclass(frozen=True, slots=True)
class Refusal:
    subject: Subject
    kind: str
    limit: int
    retry_after: float | None = None
    used: int = 0  # budgets: consumed in the period
    reserved: int = 0  # budgets: held by requests in flight
    wanted: int = 0  # what the request needed of it
    unit: str = ""  # budgets: the budget's unit


@dataclass(slots=True)
class Verdict:
    refusal: Refusal | None = None
    windows: dict[tuple[Subject, str], Window] = field(default_factory=dict)  # (subject, RPM|TPM)
    unseeded: list[BudgetClaim] = field(default_factory=list)  # counters to seed, then claim again
    clock: float | None = None  # the store's now, when the claim's periods are not the store's: claim again


@dataclass(frozen=True, slots=True)
class Reading:
    """A subject's counters as `gateway limits show` tells them."""

    requests: Window | None = None
    tokens: Window | None = None
    in_flight: int | None = None
    budgets: dict[str, tuple[int, int]] = field(default_factory=dict)  # counter -> (used, reserved)


Settled = Callable[[BaseException | None], None]  # told how a settlement ended: None, or its failure


async def settled(counters: Counters, claim: Claim, tokens: int, spent: Mapping[str, int], now: float) -> None:
    """`counters.settle`, awaited: returns once the store has it, raises what failed."""
    ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(failure: BaseException | None) -> None:
        if ended.done():
            return
        if failure is None:
            ended.set_result(None)
        else:
            ended.set_exception(failure)

    counters.settle(claim, tokens, spent, now, done)
    await ended


class Counters(Protocol):
    # Whether a claim's verdict comes from another process (a round trip the caller can overlap
    # with other work: limits/on_request.py awaits it at the last moment).
    remote: bool

    def acquire(self, claim: Claim, now: float) -> Awaitable[Verdict]:
        """Checks and takes `claim` (atomically), or refuses it. A shared store is asked at once,
        when this is called, and awaiting gives its verdict: the caller works meanwhile."""

    def settle(self, claim: Claim, tokens: int, spent: Mapping[str, int], now: float, done: Settled) -> None:
        """The request ended having used `tokens`, and `spent` per budget counter. Begun at once,
        without a task or a future (a request's end should not cost one): `done` is called once,
        with None when the store has it, or with what failed when it could not be told."""

    async def renew(self, claims: Iterable[Claim], now: float) -> None: ...

    def time(self, now: float) -> float:
        """The store's clock, given the caller's `now`: what periods and deadlines are reckoned in."""

    async def read(self, subject: Subject, limits: Limits, now: float) -> Reading: ...

    async def ping(self) -> None:
        """Raises while the store cannot be reached."""

    async def close(self) -> None: ...


def choose(refusals: list[Refusal]) -> Refusal | None:
    """The refusal a client is told of: one no retry can help first, else the longest wait."""
    if not refusals:
        return None
    final = [r for r in refusals if r.kind in FINAL]
    return final[0] if final else max(refusals, key=lambda r: r.retry_after or 0.0)


def window(limit: int, level: float) -> Window:
    # tuple.__new__ directly: the NamedTuple's own __new__ is one more Python call, on every request
    return _new_window(Window, (limit, int(level) if level > 0 else 0, (limit - level) * REFILL_SECONDS / limit))


def refill(level: float, since: float, now: float, limit: int) -> float:
    return min(float(limit), level + max(now - since, 0.0) * limit / REFILL_SECONDS)
