"""The ledger's rollups (tables.ROLLUPS): the rows summed per hour, UTC day and UTC calendar month,
per account and some of model, key, outcome, user and endpoint; the two finest (per hour) keep
every dimension but the endpoint, and model, outcome and endpoint. A report reads whole months,
then whole days, then whole hours from the smallest rollup of each period that has the columns it
needs, and only the partial hours at its edges from the ledger (store/usage.py): it reads about as
much for a month of ten million rows as for a day.

Exactness, in the order things can go wrong:
- The ledger's writer adds a batch's rows to every rollup in the transaction that inserts them, and
  only the rows that insert actually wrote (`INSERT ... ON CONFLICT DO NOTHING RETURNING`): a batch
  retried after an uncertain commit, or a row kept in `ledger_rejects` instead, counts nowhere.
- Several writers (processes, hosts) sharing one PostgreSQL add to the same rollup rows with
  `ON CONFLICT DO UPDATE SET x = x + excluded.x`, which PostgreSQL applies under the row's lock, in
  the order of the keys: two writers take their locks in the same order and never deadlock.
- Periods are UTC hours, days and calendar months, cut in Python for the writer and in SQL for
  `rebuild` and the migration's backfill; the tests compare the two.
- `rebuild` recomputes every rollup from the ledger (a bulk load, bench/), in one transaction.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    Table,
    case,
    cast,
    delete,
    func,
    literal_column,
    select,
    type_coerce,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.store import database
from gateway.store.meter import CACHE_HIT, REFUSED
from gateway.store.tables import ROLLUP_MEASURES, ROLLUPS, UTCDateTime, ledger, rollup_tables

GRAINS = ("month", "day", "hour")  # coarsest first
# The dimensions a rollup may keep (besides account and period), and the columns each takes.
COLUMNS = {"model": ("model",), "key_id": ("key_id",), "outcome": ("outcome",), "user": ("has_user", "end_user"),
           "endpoint": ("endpoint",)}


@dataclass(frozen=True, slots=True)
class Cube:
    table: Table
    grain: str  # of GRAINS
    kept: frozenset[str]  # of COLUMNS

    @property
    def dimensions(self) -> tuple[str, ...]:
        """The key's columns, in the table's order."""
        return tuple(c.name for c in self.table.primary_key.columns)


CUBES = tuple(Cube(rollup_tables[name], grain, frozenset(kept)) for name, grain, kept in ROLLUPS)
# The rollups summed from the ledger's rows: the hourly ones no other rollup keeps more than (one
# with `user`, one with the endpoint). Every other is summed from the first of them that keeps all
# its dimensions (`source`).
FINEST = tuple(cube for cube in CUBES if cube.grain == "hour" and not any(cube.kept < other.kept for other in CUBES))


def source(cube: Cube) -> Cube:
    return next(finest for finest in FINEST if cube.kept <= finest.kept)


# A ledger row's value of each dimension column (`endpoint`: rows before it existed were completions).
_ROW_VALUES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "model": operator.itemgetter("model"), "key_id": operator.itemgetter("key_id"),
    "outcome": operator.itemgetter("outcome"), "has_user": lambda row: row.get("end_user") is not None,
    "end_user": lambda row: row.get("end_user") or "", "endpoint": lambda row: row.get("endpoint") or "completions"}


def chain(needed: Iterable[str], by_day: bool = False) -> list[Cube]:
    """The rollups a report needing `needed` (of COLUMNS) reads, coarsest first: per period, the
    first of CUBES that keeps all of them; no months when the report is per day."""
    want = set(needed)
    found = []
    for grain in GRAINS[1:] if by_day else GRAINS:
        fit = next((cube for cube in CUBES if cube.grain == grain and want <= cube.kept), None)
        if fit is not None:
            found.append(fit)
    return found


def floor(instant: datetime, grain: str) -> datetime:
    """The start of the hour, UTC day or UTC month `instant` (aware) is in."""
    start = instant.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if grain == "hour":
        return start
    return start.replace(hour=0) if grain == "day" else start.replace(day=1, hour=0)


def ceil(instant: datetime, grain: str) -> datetime | None:
    """The first period start at or after `instant`; None past the last one Python can hold."""
    start = floor(instant, grain)
    return start if start == instant else after(start, grain)


def after(start: datetime, grain: str) -> datetime | None:
    """The start of the period after the one that starts at `start`; None past the last one
    Python can hold."""
    try:
        if grain == "month":
            if start.month == 12:
                return start.replace(year=start.year + 1, month=1)
            return start.replace(month=start.month + 1)
        return start + (timedelta(hours=1) if grain == "hour" else timedelta(days=1))
    except (OverflowError, ValueError):
        return None


# -- the writer's part ------------------------------------------------------------------------------
def measures(row: dict[str, Any]) -> tuple[int, ...]:
    """One ledger row's contribution to a rollup row, in ROLLUP_MEASURES' order."""
    cost = row.get("cost_nanos")
    refused = row["outcome"] == REFUSED
    return (0 if refused else 1, 1 if row["estimated"] else 0, row["prompt_tokens"], row["completion_tokens"],
            row["total_tokens"], row.get("cached_tokens") or 0, row.get("reasoning_tokens") or 0, cost or 0,
            1 if cost is None and not refused else 0, (row.get("refusals") or 1) if refused else 0,
            1 if row["outcome"] == CACHE_HIT else 0, row.get("saved_nanos") or 0)


def _add_to(sums: dict[tuple[Any, ...], tuple[int, ...]], key: tuple[Any, ...], values: tuple[int, ...]) -> None:
    total = sums.get(key)
    sums[key] = values if total is None else tuple(map(operator.add, total, values))


async def add(connection: AsyncConnection, rows: Iterable[dict[str, Any]]) -> None:
    """Add ledger rows, just inserted in the connection's transaction, to every rollup."""
    for sql, params in statements(rows, connection.dialect.name):
        await connection.exec_driver_sql(sql, params)


def statements(rows: Iterable[dict[str, Any]], dialect: str) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """What adds ledger rows to every rollup: per rollup, its upsert as the driver's SQL and one
    tuple of values per rollup row (none without rows)."""
    # Each row is summed once into each of the finest rollups; every other is summed from those sums.
    finest: dict[Cube, dict[tuple[Any, ...], tuple[int, ...]]] = {cube: {} for cube in FINEST}
    values = [(finest[cube], [_ROW_VALUES[name] for name in cube.dimensions[2:]]) for cube in FINEST]
    hours = set()  # a batch has a few: each is floored once per grain
    for row in rows:
        account, hour, summed = row["account_id"], floor(row["started_at"], "hour"), measures(row)
        hours.add(hour)
        for sums, getters in values:
            _add_to(sums, (account, hour, *[get(row) for get in getters]), summed)
    if not hours:
        return []
    found = []
    for cube in CUBES:
        period = {hour: floor(hour, cube.grain) for hour in hours}
        summed = source(cube)
        positions = {name: i for i, name in enumerate(summed.dimensions)}
        kept = [positions[name] for name in cube.dimensions[2:]]
        # The cube's dimensions out of a finest key, as a tuple (itemgetter of one index gives the item).
        pick = operator.itemgetter(*kept) if len(kept) > 1 else lambda key, at=kept[0]: (key[at],)
        sums: dict[tuple[Any, ...], tuple[int, ...]] = {}
        for key, values in finest[summed].items():
            _add_to(sums, (key[0], period[key[1]], *pick(key)), values)
        sql, period_value = _upsert(cube, dialect)
        # In key order: concurrent writers then lock shared rollup rows in the same order.
        found.append((sql, [(key[0], period_value(key[1]), *key[2:], *sums[key]) for key in sorted(sums)]))
    return found


@functools.lru_cache(maxsize=1024)  # a batch has a few periods, repeated
def _sqlite_period(period: datetime) -> str:
    return f"{period:%Y-%m-%d %H}:00:00.000000"  # UTCDateTime's text on SQLite, for a period's start


_UPSERTS: dict[tuple[str, str], tuple[str, Callable[[datetime], Any]]] = {}


def _upsert(cube: Cube, dialect_name: str) -> tuple[str, Callable[[datetime], Any]]:
    """The cube's upsert as the driver's SQL (positional parameters in the table's column order),
    and how a period is passed to it. The writer hands the driver tuples itself: SQLAlchemy's
    per-row parameter processing was most of the writer's time (bench/usage_scale.py)."""
    found = _UPSERTS.get((cube.table.name, dialect_name))
    if found is None:
        dialect = database.dialect(dialect_name)
        insert = dialect.insert(cube.table)
        statement = insert.on_conflict_do_update(
            index_elements=list(cube.dimensions), set_={m: cube.table.c[m] + insert.excluded[m] for m in ROLLUP_MEASURES})
        driver_name = "postgresql.asyncpg" if dialect_name == "postgresql" else "sqlite.aiosqlite"
        driver = database.dialect(driver_name).dialect()
        compiled = statement.compile(dialect=driver, column_keys=[c.name for c in cube.table.columns])
        assert list(compiled.positiontup or ()) == [c.name for c in cube.table.columns]
        found = str(compiled), (_sqlite_period if dialect_name == "sqlite" else _as_is)
        _UPSERTS[(cube.table.name, dialect_name)] = found
    return found


def _as_is(period: datetime) -> datetime:
    return period


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
    kept, rest = {"hour": (13, ":00:00.000000"), "day": (10, " 00:00:00.000000"), "month": (7, "-01 00:00:00.000000")}[grain]
    return type_coerce(func.substr(column, literal_column("1"), literal_column(str(kept)))
                       .concat(literal_column(f"'{rest}'")), UTCDateTime)


def day_of(column: Any, dialect_name: str) -> ColumnElement[str]:
    """SQL for the UTC day of a UTCDateTime column, as text: YYYY-MM-DD."""
    if dialect_name == "postgresql":
        return func.to_char(column.op("AT TIME ZONE")(_UTC), literal_column("'YYYY-MM-DD'"))
    return func.substr(column, literal_column("1"), literal_column("10"))


def total(value: Any) -> ColumnElement[int]:
    """SUM of integers, as an integer: PostgreSQL sums BIGINT as NUMERIC, which its driver reads as
    Decimals, far slower than ints (a report of thousands of lines spent most of its time there)."""
    return cast(func.sum(value), BigInteger)


def ledger_measures() -> list[ColumnElement[Any]]:
    """The ledger's rows summed as rollup measures (ROLLUP_MEASURES' order), for a GROUP BY."""
    c = ledger.c
    refused = c.outcome == REFUSED
    return [
        total(case((refused, 0), else_=1)),
        total(case((c.estimated, 1), else_=0)),
        total(c.prompt_tokens),
        total(c.completion_tokens),
        total(c.total_tokens),
        func.coalesce(total(c.cached_tokens), 0),
        func.coalesce(total(c.reasoning_tokens), 0),
        func.coalesce(total(c.cost_nanos), 0),
        total(case((c.cost_nanos.is_(None) & ~refused, 1), else_=0)),
        total(case((refused, func.coalesce(c.refusals, 1)), else_=0)),
        total(case((c.outcome == CACHE_HIT, 1), else_=0)),
        func.coalesce(total(c.saved_nanos), 0),
    ]


async def rebuild(connection: AsyncConnection) -> None:
    """Every rollup recomputed from the ledger (after a bulk load); in the caller's transaction.
    The finest rollups are summed from the ledger, the others from them."""
    name = connection.dialect.name
    for cube in (*FINEST, *(cube for cube in CUBES if cube not in FINEST)):
        await connection.execute(delete(cube.table))
        if cube in FINEST:
            c, sums, time = ledger.c, ledger_measures(), ledger.c.started_at
            by = {"model": [c.model], "key_id": [c.key_id], "outcome": [c.outcome], "endpoint": [c.endpoint],
                  "user": [cast(c.end_user.is_not(None), Boolean), func.coalesce(c.end_user, literal_column("''"))]}
        else:
            c, time = source(cube).table.c, source(cube).table.c.period
            sums = [total(c[m]) for m in ROLLUP_MEASURES]
            by = {dimension: [c[column] for column in columns] for dimension, columns in COLUMNS.items()
                  if all(column in c for column in columns)}
        keys: list[ColumnElement[Any]] = [c.account_id, period_of(time, cube.grain, name)]
        for column in cube.dimensions[2:]:
            dimension = next(d for d, columns in COLUMNS.items() if column in columns)
            keys.append(by[dimension][COLUMNS[dimension].index(column)])
        query = select(*keys, *sums).group_by(*keys)
        if name == "postgresql":
            # A PostgreSQL table keeps its rows in the order they came: in time, as the writer
            # fills a rollup, a report's periods are on few pages; in a GROUP BY's hash order, a
            # period's rows are on as many pages as rows. (SQLite's rollups are their keys' order.)
            query = query.order_by(keys[1])
        await connection.execute(cube.table.insert().from_select([*cube.dimensions, *ROLLUP_MEASURES], query))
