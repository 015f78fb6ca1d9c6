"""The ledger's rollups (tables.py): the rows summed per hour and per UTC day, per account, model,
key and outcome, with and without the request's `user`. A report reads whole periods from the
smallest rollup that has its columns and only the partial hours at its edges from the ledger
(store/usage.py), so it reads about as much for a month of ten million rows as for a day.

Exactness, in the order things can go wrong:
- The ledger's writer adds a batch's rows to every rollup in the transaction that inserts them, and
  only the rows that insert actually wrote (`INSERT ... ON CONFLICT DO NOTHING RETURNING`): a batch
  retried after an uncertain commit, or a row kept in `ledger_rejects` instead, counts nowhere.
- Several writers (processes, hosts) sharing one PostgreSQL add to the same rollup rows with
  `ON CONFLICT DO UPDATE SET x = x + excluded.x`, which PostgreSQL applies under the row's lock, in
  the order of the keys: two writers take their locks in the same order and never deadlock.
- `rebuild` recomputes every rollup from the ledger (a bulk load, bench/), in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Boolean, ColumnElement, Table, case, cast, delete, func, literal_column, select, type_coerce
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.store.tables import (
    ROLLUP_MEASURES,
    UTCDateTime,
    ledger,
    usage_daily,
    usage_daily_users,
    usage_hourly,
    usage_hourly_users,
)

GRAINS = {"day": timedelta(days=1), "hour": timedelta(hours=1)}  # coarsest first


@dataclass(frozen=True, slots=True)
class Cube:
    table: Table
    grain: str  # "hour" or "day"
    with_user: bool

    @property
    def dimensions(self) -> tuple[str, ...]:
        return ("account_id", "period", "model", "key_id", "outcome", *(("has_user", "end_user") if self.with_user else ()))


CUBES = (
    Cube(usage_daily, "day", with_user=False),
    Cube(usage_hourly, "hour", with_user=False),
    Cube(usage_daily_users, "day", with_user=True),
    Cube(usage_hourly_users, "hour", with_user=True),
)


def floor(instant: datetime, grain: str) -> datetime:
    """The start of the hour or (UTC) day `instant` is in."""
    start = instant.replace(minute=0, second=0, microsecond=0)
    return start.replace(hour=0) if grain == "day" else start


def ceil(instant: datetime, grain: str) -> datetime | None:
    """The first period start at or after `instant`; None past the last one Python can hold."""
    start = floor(instant, grain)
    if start == instant:
        return start
    try:
        return start + GRAINS[grain]
    except OverflowError:
        return None


def cubes_for(with_user: bool) -> list[Cube]:
    """The cubes a report may read, coarsest first: those without `user` unless it needs `user`."""
    return [cube for cube in CUBES if cube.with_user == with_user]


# -- the writer's part ------------------------------------------------------------------------------
def measures(row: dict[str, Any]) -> tuple[int, ...]:
    """One ledger row's contribution to a rollup row, in ROLLUP_MEASURES' order."""
    cost = row.get("cost_nanos")
    return (1, 1 if row["estimated"] else 0, row["prompt_tokens"], row["completion_tokens"], row["total_tokens"],
            row.get("cached_tokens") or 0, row.get("reasoning_tokens") or 0, cost or 0, 1 if cost is None else 0)


def _key(row: dict[str, Any], cube: Cube) -> tuple[Any, ...]:
    key = (row["account_id"], floor(row["started_at"], cube.grain), row["model"], row["key_id"], row["outcome"])
    if cube.with_user:
        user = row.get("end_user")
        key += (user is not None, user or "")
    return key


async def add(connection: AsyncConnection, rows: Iterable[dict[str, Any]]) -> None:
    """Add ledger rows, just inserted in the connection's transaction, to every rollup."""
    rows = list(rows)
    if not rows:
        return
    upserts = _upserts(connection.dialect.name)
    for cube in CUBES:
        sums: dict[tuple[Any, ...], list[int]] = {}
        for row in rows:
            values = measures(row)
            total = sums.get(key := _key(row, cube))
            if total is None:
                sums[key] = list(values)
            else:
                for i, value in enumerate(values):
                    total[i] += value
        # In key order: concurrent writers then lock shared rollup rows in the same order.
        params = [dict(zip(cube.dimensions, key, strict=True)) | dict(zip(ROLLUP_MEASURES, sums[key], strict=True))
                  for key in sorted(sums)]
        await connection.execute(upserts[cube.table.name], params)


_UPSERTS: dict[str, dict[str, Any]] = {}


def _upserts(dialect_name: str) -> dict[str, Any]:
    statements = _UPSERTS.get(dialect_name)
    if statements is None:
        dialect = postgresql if dialect_name == "postgresql" else sqlite
        statements = {}
        for cube in CUBES:
            insert = dialect.insert(cube.table)
            statements[cube.table.name] = insert.on_conflict_do_update(
                index_elements=list(cube.dimensions),
                set_={m: cube.table.c[m] + insert.excluded[m] for m in ROLLUP_MEASURES})
        _UPSERTS[dialect_name] = statements
    return statements


# -- SQL over periods -------------------------------------------------------------------------------
# Constants are written into the SQL, not bound: PostgreSQL matches a GROUP BY expression to the
# selected one only when they are identical, and two bound parameters ($1, $2) are not.
_UTC = literal_column("'UTC'")


def period_of(column: Any, grain: str, dialect_name: str) -> ColumnElement[Any]:
    """SQL for the start of the hour or UTC day of a UTCDateTime column, as the same type."""
    if dialect_name == "postgresql":
        unit = literal_column(f"'{grain}'")
        return type_coerce(func.date_trunc(unit, column.op("AT TIME ZONE")(_UTC)).op("AT TIME ZONE")(_UTC), UTCDateTime)
    # SQLite keeps UTCDateTime as "YYYY-MM-DD HH:MM:SS.ffffff" (UTC): a period is a prefix of it, completed.
    if grain == "hour":
        return type_coerce(func.substr(column, literal_column("1"), literal_column("13"))
                           .concat(literal_column("':00:00.000000'")), UTCDateTime)
    return type_coerce(func.substr(column, literal_column("1"), literal_column("10"))
                       .concat(literal_column("' 00:00:00.000000'")), UTCDateTime)


def day_of(column: Any, dialect_name: str) -> ColumnElement[str]:
    """SQL for the UTC day of a UTCDateTime column, as text: YYYY-MM-DD."""
    if dialect_name == "postgresql":
        return func.to_char(column.op("AT TIME ZONE")(_UTC), literal_column("'YYYY-MM-DD'"))
    return func.substr(column, literal_column("1"), literal_column("10"))


def ledger_measures() -> list[ColumnElement[Any]]:
    """The ledger's rows summed as rollup measures (ROLLUP_MEASURES' order), for a GROUP BY."""
    c = ledger.c
    return [
        func.count(),
        func.sum(case((c.estimated, 1), else_=0)),
        func.sum(c.prompt_tokens),
        func.sum(c.completion_tokens),
        func.sum(c.total_tokens),
        func.coalesce(func.sum(c.cached_tokens), 0),
        func.coalesce(func.sum(c.reasoning_tokens), 0),
        func.coalesce(func.sum(c.cost_nanos), 0),
        func.sum(case((c.cost_nanos.is_(None), 1), else_=0)),
    ]


async def rebuild(connection: AsyncConnection) -> None:
    """Every rollup recomputed from the ledger (after a bulk load); in the caller's transaction."""
    name = connection.dialect.name
    c = ledger.c
    for cube in CUBES:
        await connection.execute(delete(cube.table))
        period = period_of(c.started_at, cube.grain, name)
        keys: list[ColumnElement[Any]] = [c.account_id, period, c.model, c.key_id, c.outcome]
        if cube.with_user:
            keys += [cast(c.end_user.is_not(None), Boolean), func.coalesce(c.end_user, literal_column("''"))]
        query = select(*keys, *ledger_measures()).group_by(*keys)
        await connection.execute(cube.table.insert().from_select([*cube.dimensions, *ROLLUP_MEASURES], query))
