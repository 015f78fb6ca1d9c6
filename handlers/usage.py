"""GET /v5/usage: the caller's usage and its cost, per account and the chosen dimensions, from the
ledger and its rollups."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

import orjson
from starlette.datastructures import QueryParams
from starlette.responses import Response

from gateway.core.errors import StorageUnavailable, ValidationFailed
from gateway.http.context import HandlerRequest
from gateway.store import usage

log = logging.getLogger("gateway")

QUERY_TIMEOUT = 30.0  # seconds; past it the report is a 503, not a request held open


async def report(request: HandlerRequest) -> Response:
    caller = request.caller
    accounts = caller.visible_accounts(request.headers.get("x-selected-account-id"))
    query = QueryParams(request.scope["query_string"])  # validated against openapi.json already
    since, until, model = _instant("start", query.get("start")), _instant("end", query.get("end")), query.get("model")
    group_by = tuple(dict.fromkeys(_listed(query.get("group_by")) or usage.DEFAULT_GROUP_BY))
    outcomes = _listed(query.get("outcome"))
    try:
        async with asyncio.timeout(QUERY_TIMEOUT), request.services.database.connect() as connection:
            lines = await usage.report(connection, accounts=accounts, start=since, end=until, model=model,
                                       outcomes=outcomes, group_by=group_by)
    except Exception as exc:  # whatever stops the database answering, the caller can only retry
        log.warning("usage report failed: %s", f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        raise StorageUnavailable("the gateway's database is unavailable; retry later",
                                 code="database_unavailable") from None
    # The body is written with orjson, not through the generated models: a report can have thousands
    # of lines, and validating each one took longer than the query (bench/usage_scale.py). Tests
    # validate every response against openapi.json instead (GATEWAY_VALIDATE_RESPONSES).
    body = {
        "object": "usage_report",
        "accounts": sorted(accounts),
        "start": since,
        "end": until,
        "model": model,
        "group_by": list(group_by),
        "outcome": None if outcomes is None else sorted(set(outcomes)),
        "data": lines,
    }
    return Response(orjson.dumps(body, option=orjson.OPT_UTC_Z), media_type="application/json")


def _listed(value: str | None) -> list[str] | None:
    """A comma-separated parameter (its pattern in openapi.json checked the names already)."""
    return None if value is None else value.split(",")


def _instant(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return usage.parse_instant(value)
    except ValueError as exc:  # should the schema's date-time check and this parser ever disagree
        problem = {"loc": ["query", name], "msg": str(exc), "type": "value_error", "input": value}
        raise ValidationFailed([problem]) from None
