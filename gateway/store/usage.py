"""Usage reports: the ledger summed per account and per any of model, day, key, user and outcome over
a time range, with what it cost; one function shared by `GET /v5/usage` and `gateway usage`.

A report is exact at any size and over any range. It reads whole UTC months, days and hours from
the rollups (store/rollups.py) and only the partial hours at the range's edges from the ledger:

    [start .. first whole hour | hours | days | months ... | days | hours | last hour .. end)
     ledger rows                 hourly  daily  monthly      daily  hourly  ledger rows

For each period it reads the smallest rollup that keeps every column the report groups or filters
by (no months for a report per day). An edge that is most of a period is that period less the rest
(segments()). The pieces are one statement whose rows are the report's lines (_lines()).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, NotRequired, TypedDict

from sqlalchemy import ColumnElement, Select, case, func, literal_column, null, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.store import rollups
from gateway.store.prices import usd
from gateway.store.rollups import Cube
from gateway.store.tables import ROLLUP_MEASURES, ledger

# What a report can be grouped by (lines are always per account too), and the field each names.
DIMENSIONS = {"model": "model", "day": "day", "key": "key_id", "user": "user", "outcome": "outcome",
              "endpoint": "endpoint"}
DEFAULT_GROUP_BY = ("model",)


class UsageLine(TypedDict):
    """One line of a report, as the API (openapi.json's UsageLine) and the CLI show it. A plain
    dict made straight from the database's sums: a report can have thousands of lines, and an
    object per line, then a dict from it, was most of such a report's time."""

    account_id: str
    # One field for each dimension the report groups by (DIMENSIONS' values), in the order asked.
    model: NotRequired[str]
    day: NotRequired[str]  # YYYY-MM-DD, UTC
    key_id: NotRequired[str]
    user: NotRequired[str | None]  # None: the requests without one
    outcome: NotRequired[str]
    endpoint: NotRequired[str]  # "completions" or "chat"
    requests: int  # that reached a vendor
    estimated_requests: int  # rows whose tokens the gateway counted because the vendor did not report them
    refused_requests: int  # refused by a limit before any vendor call (store/meter.py REFUSED): cost nothing
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int
    reasoning_tokens: int
    # The priced requests' cost (their nano-dollars summed exactly, then in dollars); None when no
    # request of the line is priced (a line of refused requests alone cost nothing).
    cost_usd: float | None
    unpriced_requests: int  # requests whose model had no price when they ran: not in the cost
    cache_hits: int  # of `requests`, answered from the response cache (no vendor call)
    cache_saved_usd: float  # what the hits' tokens would have cost at their models' prices, less what they cost


# The sums a report reads and adds up, in the order a line shows them (cost_nanos becomes cost_usd).
_SUMS = ("requests", "estimated_requests", "refused_requests", "prompt_tokens", "completion_tokens",
         "total_tokens", "cached_tokens", "reasoning_tokens", "cost_nanos", "unpriced_requests", "cache_hits",
         "saved_nanos")
_COST = _SUMS.index("cost_nanos")
_IN_DOLLARS = {"cost_nanos": "cost_usd", "saved_nanos": "cache_saved_usd"}  # nano-dollar sums, shown in dollars


def columns(group_by: Sequence[str]) -> tuple[str, ...]:
    """The fields of a line grouped by `group_by`, in order (the CLI's columns)."""
    return ("account_id", *(DIMENSIONS[d] for d in group_by), *(_IN_DOLLARS.get(s, s) for s in _SUMS))


@dataclass(frozen=True, slots=True)
class _Query:
    accounts: Collection[str] | None
    model: str | None
    outcomes: Collection[str] | None
    group_by: tuple[str, ...]
    dialect: str


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
    cut = segments(start, end, rollups.chain(needed, by_day="day" in group))
    if not cut:
        return []
    # One statement, its rows the lines in order: each a line's fields (columns()) with the
    # nano-dollars where cost_usd goes. The database sums the periods' rows and sorts them, and
    # Python only makes each row a dict: at thousands of lines, merging and sorting keys in Python
    # and one round trip per period were most of a report's time (bench/usage_scale.py).
    names, lines = columns(group), []
    cost, requests, unpriced, saved = map(names.index, ("cost_usd", "requests", "unpriced_requests",
                                                        "cache_saved_usd"))
    for row in await connection.execute(_lines(query, cut)):
        line = dict(zip(names, row))
        line["cost_usd"] = None if row[requests] and row[unpriced] == row[requests] else usd(row[cost])
        line["cache_saved_usd"] = usd(row[saved])
        lines.append(line)
    return lines  # type: ignore[return-value]  # each dict has UsageLine's fields


def _lines(query: _Query, cut: list[Segment]) -> Select[Any]:
    """The segments' SELECTs (_select) as one: their rows summed per line when there are several
    (the rows of one are distinct lines already), a `user` shown as null for the requests without
    one, in the order of the account and the grouped values (text by code point, as Python sorts
    it, whatever the database's collation; requests without `user` first)."""
    pieces = [_select(query, source, lo, hi, sign) for source, lo, hi, sign in cut]
    merged = pieces[0] if len(pieces) == 1 else union_all(*pieces)
    rows = merged.subquery("periods")
    keys: list[ColumnElement[Any]] = [rows.c.account_id]
    shown: list[ColumnElement[Any]] = [rows.c.account_id]
    for dimension in query.group_by:
        if dimension == "user":
            keys += [rows.c.has_user, rows.c.end_user]
            shown.append(case((rows.c.has_user, rows.c.end_user), else_=null()))
        else:
            keys.append(rows.c[DIMENSIONS[dimension]])
            shown.append(keys[-1])
    sums = [rows.c[m] if len(pieces) == 1 else rollups.total(rows.c[m]) for m in _SUMS]
    statement = select(*shown, *sums)
    if len(pieces) > 1:
        statement = statement.group_by(*keys)
    if any(sign < 0 for *_, sign in cut):
        # A line of the periods read whole and none of the range nets to nothing: each ledger row
        # counts once in requests or in refused_requests, so a line of the range has one at least.
        statement = statement.having(sums[_SUMS.index("requests")] + sums[_SUMS.index("refused_requests")] > 0)
    # PostgreSQL sorts text by the database's collation unless told; "C" is by byte, which for
    # UTF-8 is by code point. SQLite's default (BINARY) is that already.
    ordered = [key.collate("C") if query.dialect == "postgresql" and key.name != "has_user" else key
               for key in keys]
    return statement.order_by(*ordered)


# A piece of a report's range: the rollup it is read from (None: the ledger), from, to, and whether
# its sums are added (1) or taken away (-1).
Segment = tuple[Cube | None, datetime | None, datetime | None, int]


def segments(start: datetime | None, end: datetime | None, cubes: Sequence[Cube]) -> list[Segment]:
    """[start, end) as pieces: whole periods of the coarsest rollup in the middle, the edges from
    the finer ones, and from the ledger what is left of a partial hour. An edge that is most of a
    period is read as that whole period less what lies outside the range, when that reads fewer
    periods: 29 days of a month are the month less a day, and a range from 00:17 is whole hours
    less 17 minutes of rows. Sums of integers, taken away, are as exact as added."""
    if start is not None and end is not None and start >= end:
        return []
    if not cubes:
        return [(None, start, end, 1)]
    cube, finer = cubes[0], cubes[1:]
    lo = None if start is None else rollups.ceil(start, cube.grain)
    hi = None if end is None else rollups.floor(end, cube.grain)
    if start is not None and lo is None:
        return segments(start, end, finer)  # no period starts after it
    if lo is not None and hi is not None and lo > hi:  # inside one period, on neither of its bounds
        added = segments(start, end, finer)
        outside = _taken_away(segments(hi, start, finer)) + _taken_away(segments(end, lo, finer))
        return [(cube, hi, lo, 1), *outside] if 1 + _cost(outside) < _cost(added) else added
    first, last, before, after = lo, hi, [], []
    if start is not None and start != lo:
        before = segments(start, lo, finer)
        outside = _taken_away(segments(rollups.floor(start, cube.grain), start, finer))
        if 1 + _cost(outside) < _cost(before):
            first, before = rollups.floor(start, cube.grain), outside
    if end is not None and end != hi:
        after = segments(hi, end, finer)
        bound = rollups.after(hi, cube.grain)
        outside = [] if bound is None else _taken_away(segments(end, bound, finer))
        if bound is not None and 1 + _cost(outside) < _cost(after):
            last, after = bound, outside
    if first is not None and last is not None and first >= last:  # no whole period, none completed
        return segments(start, end, finer)
    return [*before, (cube, first, last, 1), *after]


def _taken_away(pieces: list[Segment]) -> list[Segment]:
    return [(cube, lo, hi, -sign) for cube, lo, hi, sign in pieces]


def _cost(pieces: list[Segment]) -> int:
    """About how many rows bounded pieces read, in periods: at the scale where cost matters a
    rollup has about as many rows per period at every grain (one per active key of the period),
    and a piece of the ledger costs as one; its length is what the choice leaves alike."""
    total = 0
    for cube, lo, hi, _ in pieces:
        assert lo is not None and hi is not None  # an edge is bounded
        if cube is None or cube.grain == "hour":
            total += 1 if cube is None else (hi - lo) // timedelta(hours=1)
        elif cube.grain == "day":
            total += (hi - lo).days
        else:
            total += (hi.year - lo.year) * 12 + hi.month - lo.month
    return total


def _select(query: _Query, source: Cube | None, lo: datetime | None, hi: datetime | None,
            sign: int = 1) -> Select[Any]:
    """The SELECT of one segment: the account, each grouped value (a `user` as has_user and
    end_user, as the rollups keep it), then the sums (_SUMS' order; negated for a segment taken
    away), each column named as the rollups name it, each sum an integer the driver returns as an int."""
    table = ledger if source is None else source.table
    time = ledger.c.started_at if source is None else table.c.period
    keys: list[ColumnElement[Any]] = [table.c.account_id]
    grouped: list[ColumnElement[Any]] = [table.c.account_id]
    for dimension in query.group_by:
        if dimension == "day":
            grouped.append(rollups.day_of(time, query.dialect))
            keys.append(grouped[-1].label("day"))
        elif dimension == "user" and source is not None:
            keys += [table.c.has_user, table.c.end_user]
            grouped += keys[-2:]
        elif dimension == "user":  # as a rollup keeps it: has_user false (and '') for the requests without one
            keys += [table.c.end_user.is_not(None).label("has_user"),
                     func.coalesce(table.c.end_user, literal_column("''")).label("end_user")]
            grouped.append(table.c.end_user)
        else:
            keys.append(table.c[DIMENSIONS[dimension]])
            grouped.append(keys[-1])
    signed: Callable[[ColumnElement[Any]], ColumnElement[Any]] = (lambda sum_: sum_) if sign > 0 else operator.neg
    if source is None:
        measures = dict(zip(ROLLUP_MEASURES, rollups.ledger_measures(), strict=True))
        statement = select(*keys, *(signed(measures[m]).label(m) for m in _SUMS)).group_by(*grouped)
    elif _one_row_per_line(query, source, lo, hi):
        statement = select(*keys, *(signed(table.c[m]).label(m) for m in _SUMS))
    else:
        statement = select(*keys, *(signed(rollups.total(table.c[m])).label(m) for m in _SUMS)).group_by(*grouped)
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


def _one_row_per_line(query: _Query, source: Cube, lo: datetime | None, hi: datetime | None) -> bool:
    """Whether a rollup's rows from [lo, hi) are each a line already, with no GROUP BY: the rollup
    keeps exactly the grouped dimensions (its key is then the line's) and the range is one period.
    Summing rows that are each their own group took the database longer than reading them."""
    kept = {column for d in query.group_by if d != "day" for column in rollups.COLUMNS[DIMENSIONS[d]]}
    return (lo is not None and hi is not None and rollups.after(lo, source.grain) == hi
            and set(source.dimensions[2:]) == kept)


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
