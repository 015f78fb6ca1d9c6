"""What a key or an account has consumed of a budget, from the ledger: the seed of a budget's
counter (limiter._seed) and what `gateway limits show` prints. A cache hit counts in no budget."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store.limits import KEY, Period, Subject, Unit
from gateway.store.meter import CACHE_HIT
from gateway.store.tables import ledger


def _counted(subject: Subject, period: Period) -> tuple[ColumnElement[bool], ...]:
    """The ledger rows that count in `subject`'s budgets of `period`: its requests that started in
    it, cache hits aside."""
    who = ledger.c.key_id if subject.kind == KEY else ledger.c.account_id
    return (who == subject.id, ledger.c.started_at >= period.start, ledger.c.started_at < period.end,
            ledger.c.outcome != CACHE_HIT)


async def consumed(engine: AsyncEngine, subject: Subject, unit: Unit, period: Period,
                   ended_before: datetime | None = None) -> int:
    """What `subject` consumed of `unit` in `period`, from the ledger (of the requests that ended
    before `ended_before`, when given)."""
    query = select(func.coalesce(func.sum(ledger.c[unit.column]), 0)).where(*_counted(subject, period))
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
             .where(*_counted(subject, period), ledger.c.ended_at >= since, amount > 0)
             .order_by(ledger.c.ended_at.desc()).limit(MAX_RECENT))
    async with engine.connect() as connection:
        return {request_id: int(value) for request_id, value in await connection.execute(query)}
