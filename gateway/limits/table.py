"""The `limits` table: what administration writes into it (`set_limits`, `clear_limits`) and the copy
a running gateway keeps (`LimitsTable`, reread whole every `limits_cache_seconds`, so a change
reaches every gateway within that). What a limit is: limits/rules.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.limits.rules import KEY, UNITS, Budget, Limits, Subject
from gateway.store.accounts import AccountsError, UnknownObject
from gateway.store.tables import accounts, api_keys, limits

log = logging.getLogger("gateway.limits")


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

