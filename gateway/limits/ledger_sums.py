"""What a key or an account has consumed of a budget, summed from the ledger: the seed of a budget's
counter (limiter._seed) and what `gateway limits show` prints (limits/consumption.py). A cache hit
counts in a budget whose unit counts hits (dollars: what it was billed), in no other."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.limits.rules import KEY, Period, Subject, Unit
from gateway.store.meter import CACHE_HIT
from gateway.store.tables import api_keys, ledger


def of_subject(subject: Subject) -> ColumnElement[bool]:
    """The ledger rows of `subject`: an account's, or a key's and those of every key of its
    lineage (a key counts under its rotation chain's first: limits/rules.py counted_as)."""
    if subject.kind != KEY:
        return ledger.c.account_id == subject.id
    chain = select(api_keys.c.id).where((api_keys.c.id == subject.id) | (api_keys.c.lineage == subject.id))
    return ledger.c.key_id.in_(chain)


def _counted(subject: Subject, unit: Unit, period: Period) -> tuple[ColumnElement[bool], ...]:
    """The ledger rows that count in `subject`'s budget in `unit` of `period`: its requests that
    started in it, cache hits aside unless the unit counts them."""
    counted = (of_subject(subject), ledger.c.started_at >= period.start, ledger.c.started_at < period.end)
    return counted if unit.counts_hits else (*counted, ledger.c.outcome != CACHE_HIT)


async def consumed(engine: AsyncEngine, subject: Subject, unit: Unit, period: Period,
                   ended_before: datetime | None = None) -> int:
    """What `subject` consumed of `unit` in `period`, from the ledger (of the requests that ended
    before `ended_before`, when given)."""
    query = select(func.coalesce(func.sum(ledger.c[unit.column]), 0)).where(*_counted(subject, unit, period))
    if ended_before is not None:
        query = query.where(ledger.c.ended_at < ended_before)
    async with engine.connect() as connection:
        return int(await connection.scalar(query))


MAX_RECENT = 10_000  # rows of the last SEED_LAG seconds told by id (past it, the oldest are left out)


async def consumed_since(engine: AsyncEngine, subject: Subject, unit: Unit, period: Period,
                         since: datetime) -> dict[str, int]:
    """What each of `subject`'s requests in `period` that ended at or after `since` consumed of
    `unit`, by request id."""
    amount = ledger.c[unit.column]
    query = (select(ledger.c.request_id, amount)
             .where(*_counted(subject, unit, period), ledger.c.ended_at >= since, amount > 0)
             .order_by(ledger.c.ended_at.desc()).limit(MAX_RECENT))
    async with engine.connect() as connection:
        return {request_id: int(value) for request_id, value in await connection.execute(query)}
