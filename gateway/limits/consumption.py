"""What each limit of a key or an account has consumed so far, as administration shows it (the CLI's
`gateway limits show` and `/v5/admin/limits/...`): from the live counters when the gateways count in
Redis, else from the ledger (requests and tokens of the last minute, the budget period's
consumption); requests in flight are known only to Redis (or to the gateway process counting them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.limits import limiter
from gateway.limits.counters import Counters, Reading
from gateway.limits.ledger_sums import consumed, of_subject
from gateway.limits.redis_counters import RedisCounters
from gateway.limits.rules import Limits, Subject, counted_as
from gateway.store.meter import REFUSED
from gateway.store.resp import RedisError, RedisUnavailable
from gateway.store.tables import ledger


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
