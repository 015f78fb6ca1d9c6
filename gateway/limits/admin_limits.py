"""Limits as administration sees them (the CLI's `gateway limits` and `/v5/admin/limits/...`): the
checks every change to them passes, and what each limit has consumed so far (`consumption`).

Consumption comes from the live counters when the gateways count in Redis, else from the ledger
(requests and tokens of the last minute, the budget period's consumption); requests in flight are
known only to Redis (or to the gateway process counting them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.limits import limiter
from gateway.limits.consumption import consumed, of_subject
from gateway.limits.counters import Counters, Reading
from gateway.limits.redis_counters import RedisCounters
from gateway.limits.rules import PERIODS, RATES, UNITS, Limits, Subject, counted_as
from gateway.store.accounts import AccountsError
from gateway.store.meter import REFUSED
from gateway.store.resp import RedisError, RedisUnavailable
from gateway.store.tables import ledger

# The largest count or amount a limit takes (requests, tokens, nano-dollars): Redis counts in its Lua
# scripts with doubles, exact below 2^53, and the counters' arithmetic must stay exact to the unit
# (a TPM of 2^63 read back as a bucket fuller than its limit: "used -1"). The same bound as
# store/limits.py MAX_BUDGET_USD in nano-dollars.
MAX_AMOUNT = 10**15
# What a change may set or clear: the limits table's columns (budget_period is `period` over HTTP).
FIELDS = (*RATES, *(unit.limit_column for unit in UNITS.values()), "budget_period", "models", "cache")


def check_pattern(pattern: str) -> str:
    """A model pattern of an allow-list: one that can match a "vendor/name" (an empty one, or one
    naming no vendor, would set a list that refuses every model)."""
    pattern = pattern.strip()
    if not pattern:
        raise AccountsError("an empty pattern matches no model (to lift the allow-list, clear `models`)",
                            field="models")
    if "/" not in pattern and not any(c in pattern for c in "*?["):
        raise AccountsError(f"{pattern!r} matches no model: models are written vendor/name "
                            "(e.g. openai/* or local/smollm2-135m)", field="models")
    return pattern


def checked(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` (FIELDS; a None clears one), each checked: counts from 1 (budgets from 0) to
    MAX_AMOUNT, a known period, patterns that can match a model."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in FIELDS:
            raise AccountsError(f"unknown limit {name!r}: choose from {', '.join(FIELDS)}", field=name)
        if value is None:
            out[name] = None
        elif name == "models":
            out[name] = [check_pattern(p) for p in value]
        elif name == "cache":  # the response cache's switch (docs/cache.md)
            if not isinstance(value, bool):
                raise AccountsError("cache is on or off: true or false", field="cache")
            out[name] = value
        elif name == "budget_period":
            if value not in PERIODS:
                raise AccountsError(f"period {value!r}: choose from {', '.join(PERIODS)}", field="period")
            out[name] = value
        else:
            least = 0 if name.startswith("budget_") else 1
            count = whole(value)
            if count is None or not least <= count <= MAX_AMOUNT:
                raise AccountsError(f"{name} must be a whole number from {least} to {MAX_AMOUNT:,}", field=name)
            out[name] = count
    return out


def whole(value: Any) -> int | None:
    """`value` as an int if it is a whole number (JSON's 5.0 too), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) else None


@dataclass(frozen=True, slots=True)
class Consumed:
    """One limit beside what it has consumed. Amounts are the unit's (requests, tokens, nano-dollars)."""

    limit: str  # "rpm", "tpm", "concurrent", "budget_<unit>", "models"
    value: int | tuple[str, ...]
    used: int | None
    remaining: int | None
    source: str  # "redis", "ledger", ...
    resets_in: float | None = None  # seconds until a rate's bucket is full again (live counters only)
    resets_at: datetime | None = None  # a budget's period end
    period: str | None = None  # a budget's
    last_minute: bool = False  # a rate read from the ledger's last 60 s, not from a bucket


async def consumption(engine: AsyncEngine, counters: Counters | None, subject: Subject, limits: Limits,
                      now: float | None = None) -> list[Consumed]:
    """What each of `subject`'s limits has consumed: from `counters` (the live ones: the gateways'
    Redis, or a gateway's own memory) when given and reachable, else from the ledger. (A rotated
    key's consumption is its lineage's, counted with its predecessors'.)"""
    now = limiter.wall_clock() if now is None else now
    subject = counted_as(subject, limits)
    reading, source = Reading(), "ledger"
    if counters is not None:
        try:
            reading = await counters.read(subject, limits, now)
            source = "redis" if isinstance(counters, RedisCounters) else "the gateway's memory"
        except (RedisError, RedisUnavailable) as exc:
            counters, source = None, f"ledger (redis unavailable: {type(exc).__name__})"
    minute = await _last_minute(engine, subject, now) if counters is None else (0, 0)
    rows = []
    for name, window, used_last_minute in (("rpm", reading.requests, minute[0]), ("tpm", reading.tokens, minute[1])):
        limit = getattr(limits, name)
        if limit is None:
            continue
        if window is not None:
            # A limit set before MAX_AMOUNT bounded it reads back rounded as a double: never "used -1".
            remaining = min(window.remaining, limit)
            rows.append(Consumed(name, limit, limit - remaining, remaining, source, resets_in=window.reset))
        else:
            rows.append(Consumed(name, limit, used_last_minute, max(limit - used_last_minute, 0), source,
                                 last_minute=True))
    if limits.concurrent is not None:
        in_flight = reading.in_flight
        rows.append(Consumed("concurrent", limits.concurrent, in_flight,
                             None if in_flight is None else max(limits.concurrent - in_flight, 0),
                             source if in_flight is not None else "(in the gateway's memory)"))
    for budget in limits.budgets:
        period = budget.period_at(now)
        counter = f"{budget.unit.name}:{period.id}"
        if counter in reading.budgets:
            used, reserved = reading.budgets[counter]
            row_source = f"{source} ({budget.unit.show(reserved)} reserved in flight)"
        else:
            used, row_source = await consumed(engine, subject, budget.unit, period), "ledger"
        rows.append(Consumed(budget.unit.limit_column, budget.limit, used, max(budget.limit - used, 0), row_source,
                             resets_at=period.end, period=budget.period))
    if limits.cache is not None:
        rows.append(Consumed("cache", limits.cache, None, None, ""))
    if limits.models is not None:
        rows.append(Consumed("models", limits.models, None, None, ""))
    return rows


async def _last_minute(engine: AsyncEngine, subject: Subject, now: float) -> tuple[int, int]:
    since = datetime.fromtimestamp(now, UTC) - timedelta(seconds=60)
    query = select(func.count(), func.coalesce(func.sum(ledger.c.total_tokens), 0)).where(
        of_subject(subject), ledger.c.started_at >= since, ledger.c.outcome != REFUSED)
    async with engine.connect() as connection:
        count, tokens = (await connection.execute(query)).one()
    return int(count), int(tokens)
