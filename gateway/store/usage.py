"""Usage reports: the ledger summed per account and per any of model, day, key, user and outcome over
a time range, with what it cost; one function shared by `GET /v5/usage` and `gateway usage`.

A report is exact at any size and over any range. It reads whole UTC months, days and hours from
the rollups (store/rollups.py) and only the partial hours at the range's edges from the ledger:

    [start .. first whole hour | hours | days | months ... | days | hours | last hour .. end)
     ledger rows                 hourly  daily  monthly      daily  hourly  ledger rows

For each period it reads the smallest rollup that keeps every column the report groups or filters
by (no months for a report per day).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.store import rollups
from gateway.store.prices import usd
from gateway.store.rollups import Cube
from gateway.store.tables import ROLLUP_MEASURES, ledger

# What a report can be grouped by (lines are always per account too), and the field each names.
DIMENSIONS = {"model": "model", "day": "day", "key": "key_id", "user": "user", "outcome": "outcome"}
DEFAULT_GROUP_BY = ("model",)


@dataclass(frozen=True, slots=True)
class UsageLine:
    account_id: str
    group: dict[str, Any]  # field (DIMENSIONS' values) -> value, for each grouped dimension, in order
    requests: int  # that reached a vendor
    estimated_requests: int  # rows whose tokens the gateway counted because the vendor did not report them
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int
    reasoning_tokens: int
    cost_nanos: int  # of the priced requests
    unpriced_requests: int  # requests whose model had no price when they ran: not in the cost
    refused_requests: int  # refused by a limit before any vendor call (store/meter.py REFUSED): cost nothing

    @property
    def cost_usd(self) -> float | None:
        """The priced requests' cost in dollars; None when no request of the line is priced (a line
        of refused requests alone cost nothing)."""
        return None if self.requests and self.unpriced_requests == self.requests else usd(self.cost_nanos)

    def fields(self) -> dict[str, Any]:
        """The line as the API and the CLI show it."""
        measures = {name: getattr(self, name) for name in _SHOWN_MEASURES}
        return {"account_id": self.account_id, **self.group, **measures, "cost_usd": self.cost_usd,
                "unpriced_requests": self.unpriced_requests}


_SHOWN_MEASURES = ("requests", "estimated_requests", "refused_requests", "prompt_tokens", "completion_tokens",
                   "total_tokens", "cached_tokens", "reasoning_tokens")


def columns(group_by: Sequence[str]) -> tuple[str, ...]:
    """The fields of a line grouped by `group_by`, in order (the CLI's columns)."""
    return ("account_id", *(DIMENSIONS[d] for d in group_by), *_SHOWN_MEASURES, "cost_usd", "unpriced_requests")


@dataclass(frozen=True, slots=True)
class _Query:
    accounts: Collection[str] | None
    model: str | None
    outcomes: Collection[str] | None
    group_by: tuple[str, ...]
    dialect: str
    sums: dict[tuple[Any, ...], list[int]] = field(default_factory=dict)


async def report(
    connection: AsyncConnection,
    *,
    accounts: Collection[str] | None,
    start: datetime | None = None,
    end: datetime | None = None,
    model: str | None = None,
    outcomes: Collection[str] | None = None,
    group_by: Sequence[str] = DEFAULT_GROUP_BY,
) -> list[UsageLine]:
    """Requests that started in [start, end), per account and per `group_by` (DIMENSIONS' keys),
    ordered by account, then by the grouped values in that order. `accounts` None means every
    account (the operator's CLI); an API caller always passes the accounts its key grants."""
    if accounts is not None and not accounts:
        return []
    group = tuple(dict.fromkeys(group_by))  # each once, in the order given
    # The ledger stores NUL as U+FFFD (PostgreSQL text cannot hold it); a filter matches the same way.
    query = _Query(None if accounts is None else sorted(accounts), model and model.replace("\x00", "\ufffd"),
                   None if outcomes is None else sorted(outcomes), group, connection.dialect.name)
    needed = {DIMENSIONS[d] for d in group if d != "day"} | ({"model"} if model is not None else set()) \
        | ({"outcome"} if outcomes is not None else set())
    for source, lo, hi in segments(start, end, rollups.chain(needed, by_day="day" in group)):
        for row in await connection.execute(_select(query, source, lo, hi)):
            key, values = tuple(_key(query, source, row)), [int(v) for v in row[-len(ROLLUP_MEASURES):]]
            total = query.sums.get(key)
            if total is None:
                query.sums[key] = values
            else:
                for i, value in enumerate(values):
                    total[i] += value
    fields = [DIMENSIONS[d] for d in group]
    lines = [UsageLine(key[0], dict(zip(fields, key[1:], strict=True)), *values) for key, values in query.sums.items()]
    lines.sort(key=lambda line: (line.account_id, *((v is not None, v) for v in line.group.values())))
    return lines


def segments(start: datetime | None, end: datetime | None,
             cubes: Sequence[Cube]) -> list[tuple[Cube | None, datetime | None, datetime | None]]:
    """[start, end) as (rollup, from, to) pieces: whole periods of the coarsest rollup in the middle,
    the edges from the finer ones, and from the ledger (None) what is left of a partial hour."""
    if start is not None and end is not None and start >= end:
        return []
    if not cubes:
        return [(None, start, end)]
    cube, finer = cubes[0], cubes[1:]
    lo = None if start is None else rollups.ceil(start, cube.grain)
    hi = None if end is None else rollups.floor(end, cube.grain)
    if (start is not None and lo is None) or (lo is not None and hi is not None and lo >= hi):
        return segments(start, end, finer)  # no whole period inside
    before = segments(start, lo, finer) if start is not None else []
    after = segments(hi, end, finer) if end is not None else []
    return [*before, (cube, lo, hi), *after]


def _select(query: _Query, source: Cube | None, lo: datetime | None, hi: datetime | None) -> Any:
    table = ledger if source is None else source.table
    time = ledger.c.started_at if source is None else table.c.period
    keys: list[ColumnElement[Any]] = [table.c.account_id]
    for dimension in query.group_by:
        if dimension == "day":
            keys.append(rollups.day_of(time, query.dialect))
        elif dimension == "user":
            keys += [table.c.end_user] if source is None else [table.c.has_user, table.c.end_user]
        else:
            keys.append(table.c[DIMENSIONS[dimension]])
    sums = rollups.ledger_measures() if source is None else [rollups.total(table.c[m]) for m in ROLLUP_MEASURES]
    statement = select(*keys, *sums).group_by(*keys)
    if query.accounts is not None:
        statement = statement.where(table.c.account_id.in_(query.accounts))
    if lo is not None:
        statement = statement.where(time >= lo)
    if hi is not None:
        statement = statement.where(time < hi)
    if query.model is not None:
        statement = statement.where(table.c.model == query.model)
    if query.outcomes is not None:
        statement = statement.where(table.c.outcome.in_(query.outcomes))
    return statement


def _key(query: _Query, source: Cube | None, row: Any) -> list[Any]:
    """A result row's grouping values: the account, then each dimension's value (`user` None for
    requests without one)."""
    values, i = [row[0]], 1
    for dimension in query.group_by:
        if dimension == "user" and source is not None:
            values.append(row[i + 1] if row[i] else None)
            i += 2
        else:
            values.append(row[i])
            i += 1
    return values


_INSTANT = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?)?"
    r"([Zz]|[+-]\d{2}:\d{2})?"
)


def parse_instant(text: str) -> datetime:
    """An RFC 3339 date-time (what the API documents) as an aware UTC datetime. For the CLI it also
    takes a date alone or a time without seconds or offset (meaning UTC). A leap second counts as
    the end of its minute; an instant beyond what Python can hold becomes the nearest one it can."""
    match = _INSTANT.fullmatch(text.strip())
    if not match:
        raise ValueError(f"not a date-time: {text!r} (e.g. 2026-11-30T12:00:00Z or 2026-11-30)")
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    seconds = int(second or 0)
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    if seconds == 60:
        seconds, micro = 59, 999_999
    zone = UTC
    if offset and offset.upper() != "Z":
        sign = -1 if offset[0] == "-" else 1
        zone = timezone(sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6])))
    local = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), seconds, micro, tzinfo=zone)
    try:
        return local.astimezone(UTC)
    except OverflowError:
        return datetime.min.replace(tzinfo=UTC) if local.year == 1 else datetime.max.replace(tzinfo=UTC)
