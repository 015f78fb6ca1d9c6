"""Limits on a key or an account, as data: requests and tokens per minute, requests in flight,
budgets per UTC day or month, and a model allow-list of glob patterns. Both a key's and its
account's limits apply to a request; the tighter one refuses it.

This module is the data: the `limits` table, what the CLI writes into it, and the copy a running
gateway keeps (`LimitsTable`, reread whole every `limits_cache_seconds`, so a change reaches every
gateway within that). The counting is gateway/store/counters.py (in memory) or
gateway/store/counters_redis.py (shared), driven per request by gateway/store/limiter.py.

A budget is generic over its unit (`Unit`): a unit names the ledger column a period's consumption
is summed from, how an operator writes an amount, and what a request may cost before it runs. The
units are tokens and US dollars (counted in nano-dollars, the ledger's `cost_nanos`, priced by
store/prices.py); a unit is one entry of UNITS plus its `budget_<name>` column.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.store.accounts import AccountsError, UnknownObject
from gateway.store.meter import CACHE_HIT
from gateway.store.prices import NANOS_PER_USD, Prices
from gateway.store.tables import accounts, api_keys, limits

log = logging.getLogger("gateway.limits")

KEY, ACCOUNT = "key", "account"
PERIODS = ("day", "month")
RATES = ("rpm", "tpm", "concurrent")


@dataclass(frozen=True, slots=True)
class Unit:
    """What a budget counts. Amounts are whole numbers of the unit's smallest part."""

    name: str  # in the CLI (--budget-<name>), the table (budget_<name>) and the counters' names
    column: str  # the ledger column a request's consumption is read from
    parse: Callable[[str], int]  # an operator's amount, as the CLI takes it
    show: Callable[[int], str]
    # The most a request may consume before it runs: (prices, model, prompt tokens, completion
    # tokens) -> amount; None when it cannot be told (a model without a price, for dollars).
    reserve: Callable[[Prices | None, str, int, int], int | None]
    # Whether a response cache hit counts in it, by what its ledger row says: dollars count what a
    # hit is billed (GATEWAY_CACHE_HIT_PRICE); tokens do not count a hit's (no vendor used them).
    counts_hits: bool = False
    metavar: str = "N"  # how the CLI's help writes an amount
    noun: str = ""  # what an amount is, in the CLI's help (default: the name)
    after: str = ""  # what follows an amount in a message ("30 tokens"; dollars show their sign)

    @property
    def limit_column(self) -> str:
        return f"budget_{self.name}"

    def reserved(self, prices: Prices | None, model: str, prompt: int, completion: int,
                 hit_share: float | None = None) -> int | None:
        """`reserve`, for a cache hit too (`hit_share`: the share of its tokens' price it is billed):
        what it is billed where the unit counts hits, else nothing."""
        amount = self.reserve(prices, model, prompt, completion)
        if amount is None or hit_share is None:
            return amount
        return round(amount * hit_share) if self.counts_hits else 0

    def used(self, row: Mapping[str, Any]) -> int:
        """What a request's ledger row consumed of the unit (a cache hit's, only where hits count)."""
        if row.get("outcome") == CACHE_HIT and not self.counts_hits:
            return 0
        return int(row.get(self.column) or 0)


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


# The largest budget in dollars: Redis counts in its Lua scripts with doubles, exact to 2^53.
MAX_BUDGET_USD = 1_000_000


def _dollars(text: str) -> int:
    """US dollars ("12.50", to the nano-dollar) as nano-dollars, exactly."""
    try:
        value = Decimal(text.strip().removeprefix("$"))
    except InvalidOperation:
        raise ValueError("give dollars, e.g. 25 or 12.50") from None
    if not value.is_finite() or value < 0 or value > MAX_BUDGET_USD:
        raise ValueError(f"must be from 0 to {MAX_BUDGET_USD:,} dollars")
    nanos = value * NANOS_PER_USD
    if nanos != nanos.to_integral_value():
        raise ValueError("dollars have at most 9 decimals (a nano-dollar)")
    return int(nanos)


def _show_dollars(nanos: int) -> str:
    dollars = (Decimal(nanos) / NANOS_PER_USD).quantize(Decimal("0.000000001")).normalize()
    text = f"{dollars:f}"
    whole, _, cents = text.partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


TOKENS = Unit("tokens", "total_tokens", parse=_count, show=str,
              reserve=lambda prices, model, prompt, completion: prompt + completion, after=" tokens")
USD = Unit("usd", "cost_nanos", parse=_dollars, show=_show_dollars,
           reserve=lambda prices, model, prompt, completion: None if prices is None
           else prices.cost_nanos(model, prompt, completion), counts_hits=True,
           metavar="USD", noun="US dollars (e.g. 25 or 12.50), by the gateway's prices,")
UNITS: dict[str, Unit] = {unit.name: unit for unit in (TOKENS, USD)}


@dataclass(frozen=True, slots=True)
class Budget:
    unit: Unit
    limit: int
    period: str  # "day" or "month", UTC calendar

    def period_at(self, now: float) -> Period:
        return Period.at(self.period, now)


@dataclass(frozen=True, slots=True)
class Period:
    name: str  # "day" or "month"
    id: str  # "2026-12-01" or "2026-12": part of the counter's name
    start: datetime
    end: datetime

    @classmethod
    def at(cls, name: str, now: float) -> Period:
        current = _CURRENT.get(name)  # every request asks; the answer changes once a day or a month
        if current is not None and current[0] <= now < current[1]:
            return current[2]
        period = cls._compute(name, now)
        _CURRENT[name] = (period.start.timestamp(), period.end.timestamp(), period)
        return period

    @classmethod
    def _compute(cls, name: str, now: float) -> Period:
        moment = datetime.fromtimestamp(now, UTC)
        if name == "day":
            start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
            end = datetime.fromordinal(start.toordinal() + 1).replace(tzinfo=UTC)
            return cls(name, start.strftime("%Y-%m-%d"), start, end)
        start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
        return cls(name, start.strftime("%Y-%m"), start, end)


_CURRENT: dict[str, tuple[float, float, Period]] = {}


@dataclass(frozen=True, slots=True)
class Limits:
    """One subject's limits; None is no limit of that kind."""

    rpm: int | None = None
    tpm: int | None = None
    concurrent: int | None = None
    budgets: tuple[Budget, ...] = ()
    models: tuple[str, ...] | None = None  # glob patterns ("openai/*"); None allows every model
    # Whether the response cache serves it (gateway/http/cache.py): the key's switch wins over its
    # account's; None says nothing (the cache serves it when the gateway has one).
    cache: bool | None = None
    # A rotated key's: the first key of its rotation chain, whose counters its requests count in,
    # so that a key and its successors have one budget (not a limit: read from the key's row).
    lineage: str | None = None
    # When a key's row says it stops working (revoked, its grace over, or expired; a POSIX time),
    # None for an account or a key without an end: limits of a key that no request can use need
    # no counting (not a limit: read from the key's row).
    ends_at: float | None = None

    @property
    def empty(self) -> bool:
        """Whether it limits nothing (and says nothing of the cache): a subject with no limits."""
        return self.rpm is self.tpm is self.concurrent is self.models is self.cache is None and not self.budgets

    @property
    def counted(self) -> bool:
        """Whether any of it needs counters (the allow-list does not)."""
        return bool(self.rpm or self.tpm or self.concurrent or self.budgets)

    def counted_at(self, now: float) -> bool:
        """Whether it needs counters at `now`: it counts something, and no longer-usable key holds it."""
        return self.counted and (self.ends_at is None or self.ends_at > now)

    def allows(self, model: str) -> bool:
        return self.models is None or any(fnmatch.fnmatchcase(model, pattern) for pattern in self.models)

    def describe(self) -> dict[str, Any]:
        """The limits as the CLI and logs show them."""
        out: dict[str, Any] = {name: getattr(self, name) for name in RATES if getattr(self, name) is not None}
        for budget in self.budgets:
            out[f"budget_{budget.unit.name}"] = budget.unit.show(budget.limit)
            out["period"] = budget.period
        if self.models is not None:
            out["models"] = list(self.models)
        if self.cache is not None:
            out["cache"] = "on" if self.cache else "off"
        return out


class Subject(NamedTuple):  # a tuple: hashed and compared in C, on every request
    kind: str  # KEY or ACCOUNT
    id: str

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"


# -- the table ----------------------------------------------------------------------------------
def _from_row(row: Any) -> Limits:
    period = row.budget_period or "month"
    budgets = tuple(Budget(unit, value, period) for unit in UNITS.values()
                    if (value := getattr(row, unit.limit_column)) is not None)
    return Limits(rpm=row.rpm, tpm=row.tpm, concurrent=row.concurrent, budgets=budgets,
                  models=tuple(json.loads(row.models)) if row.models is not None else None, cache=row.cache,
                  lineage=row.lineage if row.lineage != row.subject_id else None,
                  ends_at=min((end.timestamp() for end in (row.revoked_at, row.expires_at) if end is not None),
                              default=None))


# The limits' rows, a key's with its lineage (store/accounts.py replace_key).
_ROWS = select(limits, api_keys.c.lineage, api_keys.c.revoked_at, api_keys.c.expires_at).outerjoin(
    api_keys, (limits.c.subject == KEY) & (api_keys.c.id == limits.c.subject_id))


def counted_as(subject: Subject, found: Limits) -> Subject:
    """The subject whose counters `subject`'s requests count in: a rotated key's lineage, else itself."""
    return Subject(KEY, found.lineage) if found.lineage is not None and subject.kind == KEY else subject


async def read_all(connection: AsyncConnection) -> dict[Subject, Limits]:
    rows = await connection.execute(_ROWS)
    return {Subject(r.subject, r.subject_id): _from_row(r) for r in rows}


async def check_subject(connection: AsyncConnection, subject: Subject) -> None:
    table = api_keys if subject.kind == KEY else accounts
    if not await connection.scalar(select(table.c.id).where(table.c.id == subject.id)):
        raise UnknownObject(f"no such {subject.kind}: {subject.id!r}", field=f"{subject.kind}_id",
                            code=f"unknown_{subject.kind}")


async def set_limits(connection: AsyncConnection, subject: Subject, values: Mapping[str, Any]) -> Limits:
    """Set some of a subject's limits (columns of the table: rpm, tpm, concurrent, budget_<unit>,
    budget_period, models as a list), keeping the others. Returns them all."""
    await check_subject(connection, subject)
    key = (limits.c.subject == subject.kind) & (limits.c.subject_id == subject.id)
    current = (await connection.execute(select(limits).where(key))).first()
    merged = dict(current._mapping) if current else {"subject": subject.kind, "subject_id": subject.id}
    merged |= {name: json.dumps(list(value)) if name == "models" else value for name, value in values.items()}
    has_budget = any(merged.get(unit.limit_column) is not None for unit in UNITS.values())
    if merged.get("budget_period") is not None and not has_budget:
        raise AccountsError("--period is the period of a budget: set one with it (e.g. --budget-tokens; `budget_tokens` "
                            "over HTTP)", field="budget_period")
    if has_budget and merged.get("budget_period") is None:
        merged["budget_period"] = "month"
    merged["updated_at"] = datetime.now(UTC)
    await connection.execute(delete(limits).where(key))
    await connection.execute(limits.insert().values(**merged))
    return await _read(connection, subject) or Limits()


async def clear_limits(connection: AsyncConnection, subject: Subject, names: Sequence[str] | None) -> Limits | None:
    """Remove some of a subject's limits (`names` as for set_limits), or all of them (None)."""
    await check_subject(connection, subject)
    key = (limits.c.subject == subject.kind) & (limits.c.subject_id == subject.id)
    if names is None:
        await connection.execute(delete(limits).where(key))
        return None
    cleared = {name: None for name in names}
    if any(name == unit.limit_column for unit in UNITS.values() for name in names):
        remaining = await _read(connection, subject)
        left = [b for b in (remaining.budgets if remaining else ()) if b.unit.limit_column not in names]
        if not left:
            cleared["budget_period"] = None
    await connection.execute(limits.update().where(key).values(**cleared, updated_at=datetime.now(UTC)))
    found = await _read(connection, subject)
    if found is not None and found.empty:
        await connection.execute(delete(limits).where(key))
        return None
    return found


async def _read(connection: AsyncConnection, subject: Subject) -> Limits | None:
    row = (await connection.execute(_ROWS.where(
        (limits.c.subject == subject.kind) & (limits.c.subject_id == subject.id)))).first()
    return _from_row(row) if row else None


# -- what a running gateway knows ---------------------------------------------------------------
@dataclass(slots=True)
class LimitsTable:
    """The whole limits table, reread every `ttl` seconds in the background: a request looks its
    subjects up in a dict, and a change made with the CLI reaches every gateway within `ttl`. While
    the database cannot be read, the last copy stays in force (and the log says so).

    One read at a time, shared by whoever asks for one meanwhile (`load`), and applied in the order
    the reads began: a burst of requests of a new key reads the table once, and an older copy
    never replaces a newer one."""

    engine: AsyncEngine
    ttl: float
    clock: Callable[[], float] = time.monotonic
    subjects: dict[Subject, Limits] = field(default_factory=dict)
    on_change: Callable[[dict[Subject, Limits]], None] | None = None
    _task: asyncio.Task[None] | None = None
    _failing: bool = False
    _reading: asyncio.Task[None] | None = None  # the read under way
    _begun: int = 0  # reads begun so far
    _applied: int = 0  # the last read applied (the number of its beginning)

    async def load(self) -> None:
        """Returns once a read of the table begun after this call has been applied: a read under
        way may have begun before a change the caller must see, so it is waited for, then another
        (one that the callers arriving meanwhile share) is made."""
        wanted = self._begun + 1
        while self._applied < wanted:
            if self._reading is None:
                self._reading = asyncio.create_task(self._read(), name="limits-read")
                self._reading.add_done_callback(_retrieved)
            await asyncio.shield(self._reading)

    async def _read(self) -> None:
        self._begun += 1
        number = self._begun
        try:
            async with self.engine.connect() as connection:
                found = await read_all(connection)
        finally:
            self._reading = None
        self._applied = number
        if found != self.subjects:
            self.subjects = found
            if self.on_change is not None:
                self.on_change(found)

    def start(self) -> None:
        self._task = asyncio.create_task(self._refresh_forever(), name="limits-refresh")

    async def close(self) -> None:
        for task in (self._task, self._reading):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.ttl)
            try:
                await self.load()
            except Exception as exc:
                if not self._failing:
                    log.warning("cannot reread the limits (%s); the last copy stays in force",
                                f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
                self._failing = True
                continue
            if self._failing:
                log.warning("limits reread again")
            self._failing = False

    def of(self, subject: Subject) -> Limits | None:
        return self.subjects.get(subject)


def _retrieved(read: asyncio.Task[None]) -> None:
    if not read.cancelled():
        read.exception()  # a read every waiter gave up on is not reported as never retrieved

