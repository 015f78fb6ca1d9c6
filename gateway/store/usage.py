"""Usage reports: ledger rows summed per account and model over a time range — one query, shared
by `GET /v5/usage` and `gateway usage`."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

from sqlalchemy import case, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.store.meter import REFUSED
from gateway.store.tables import ledger


@dataclass(frozen=True, slots=True)
class UsageLine:
    account_id: str
    model: str
    requests: int  # that reached a vendor
    estimated_requests: int  # rows whose tokens the gateway counted because the vendor did not report them
    refused_requests: int  # refused by a limit before any vendor call (store/meter.py REFUSED)
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int
    reasoning_tokens: int


async def report(
    connection: AsyncConnection,
    *,
    accounts: Collection[str] | None,
    start: datetime | None = None,
    end: datetime | None = None,
    model: str | None = None,
) -> list[UsageLine]:
    """Requests that started in [start, end), per account and model. `accounts` None means every
    account (the operator's CLI); an API caller always passes the accounts its key grants."""
    if accounts is not None and not accounts:
        return []
    c = ledger.c
    query = (
        select(
            c.account_id,
            c.model,
            func.sum(case((c.outcome != REFUSED, 1), else_=0)),
            func.sum(case((c.estimated, 1), else_=0)),
            func.sum(case((c.outcome == REFUSED, 1), else_=0)),
            func.sum(c.prompt_tokens),
            func.sum(c.completion_tokens),
            func.sum(c.total_tokens),
            func.coalesce(func.sum(c.cached_tokens), 0),
            func.coalesce(func.sum(c.reasoning_tokens), 0),
        )
        .group_by(c.account_id, c.model)
        .order_by(c.account_id, c.model)
    )
    if accounts is not None:
        query = query.where(c.account_id.in_(sorted(accounts)))
    if start is not None:
        query = query.where(c.started_at >= start)
    if end is not None:
        query = query.where(c.started_at < end)
    if model is not None:
        # The ledger stores NUL as U+FFFD (PostgreSQL text cannot hold it); a filter matches the same way.
        query = query.where(c.model == model.replace("\x00", "\ufffd"))
    return [UsageLine(*(int(v) if i > 1 else v for i, v in enumerate(row))) for row in await connection.execute(query)]


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
