"""Everything under /v5/admin/: accounts, keys, limits, prices and the audit trail over HTTP, for
keys with the `admin` scope. The work is gateway/admin.py's, as the CLI's is; this module
only turns bodies into its arguments and its answers and refusals into the contract's shapes."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

import orjson
from sqlalchemy.exc import SQLAlchemyError
from starlette.datastructures import QueryParams
from starlette.responses import Response

from gateway import admin
from gateway.core import errors
from gateway.core.ids import ids
from gateway.http.context import HandlerRequest
from gateway.limits import on_request
from gateway.limits.consumption import consumption
from gateway.limits.rules import ACCOUNT, KEY, UNITS, Limits, Subject
from gateway.store import stored_prices, usage
from gateway.store.accounts import Account, AccountsError, Conflict, UnknownObject
from gateway.store.prices import NANOS_PER_USD, Price, usd

log = logging.getLogger("gateway")

T = TypeVar("T")
QUERY_TIMEOUT = 10.0  # seconds; past it the answer is a 503, not a request held open
# A request's names for the limits table's columns (the rest are the same).
_OVER_HTTP = {"budget_period": "period"}
_FROM_HTTP = {http: column for column, http in _OVER_HTTP.items()}


async def _done(work: Awaitable[T], within: tuple[str, Mapping[str, Any]] | None = None) -> T:
    """The service's answer, or its refusal as the contract's error. `within`: a member of the
    body (its name and its value) whose fields a refusal may be about, located in it."""
    try:
        async with asyncio.timeout(QUERY_TIMEOUT):
            return await work
    except UnknownObject as exc:
        raise errors.NotFound(str(exc), code=exc.code, param=exc.field) from None
    except Conflict as exc:
        raise errors.Conflict(str(exc), code=exc.code, param=exc.field) from None
    except AccountsError as exc:
        # A value the schema allows that cannot be used (an expiry in the past, a pattern that
        # matches no model...): a 422 in the contract's shape, as the schema's own problems are,
        # with its own code so that a client can tell the two apart.
        field = _OVER_HTTP.get(exc.field, exc.field) if exc.field else None
        where = ["body"] if field is None else ["body", field]
        if field is not None and within is not None and field in within[1]:
            where = ["body", within[0], field]
        raise errors.ValidationFailed([{"loc": where, "msg": str(exc), "type": "value_error"}],
                                      code="invalid_value") from None
    except (SQLAlchemyError, OSError, TimeoutError) as exc:
        log.warning("administration failed: %s", f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        raise errors.StorageUnavailable("the gateway's database is unavailable; retry later",
                                        code="database_unavailable") from None


def limited(handler: Callable[[HandlerRequest], Awaitable[Response]]) -> Callable[[HandlerRequest], Awaitable[Response]]:
    """An administrative operation under its key's request rate and concurrency, as any of the
    key's requests is (a looping client or script is slowed to its key's rate): 429 past them,
    with OpenAI's x-ratelimit-* headers on its answer, an error's too, while a limit applies.
    handlers/__init__.py wraps each admin operation once, where it is routed: an operation that
    answers with another's view (a change, then the object) calls it unwrapped."""

    @functools.wraps(handler)
    async def under_limits(request: HandlerRequest) -> Response:
        grant = await on_request.admit_call(request.services.limiter, request.caller.key_id, f"admin-{ids.next()}")
        rate = on_request.headers(grant)
        try:
            _refuse_nul(request)
            response = await handler(request)
        except (errors.GatewayError, errors.ValidationFailed) as refusal:
            if rate:
                refusal.extra_headers = (refusal.extra_headers or {}) | rate
            raise
        finally:
            grant.settle(None)
        response.headers.update(rate)
        return response

    return under_limits


def _refuse_nul(request: HandlerRequest) -> None:
    """A NUL character in any value of an administrative call (its body, path or query): a 422
    naming each place, on either database alike (PostgreSQL cannot store one in text, and failed
    the change as a 503)."""
    places = _nuls(request.body, ["body"])
    places += [["path", name] for name, value in request.scope.get("path_params", {}).items() if "\x00" in value]
    query = QueryParams(request.scope["query_string"])
    places += [["query", name] for name, value in query.multi_items() if "\x00" in name or "\x00" in value]
    if places:
        raise errors.ValidationFailed([{"loc": loc, "msg": "a NUL character (U+0000) cannot be stored: remove it",
                                        "type": "value_error"} for loc in places], code="invalid_value")


def _nuls(value: Any, loc: list[str | int]) -> list[list[str | int]]:
    """Where in a JSON value a string holds a NUL (an object's key counts as its member's place)."""
    if isinstance(value, str):
        return [loc] if "\x00" in value else []
    if isinstance(value, dict):
        return [place for name, member in value.items()
                for place in ([[*loc, name]] if "\x00" in name else _nuls(member, [*loc, name]))]
    if isinstance(value, list):
        return [place for i, item in enumerate(value) for place in _nuls(item, [*loc, i])]
    return []


def _actor(request: HandlerRequest) -> admin.Actor:
    caller = request.caller
    client = request.scope.get("client")
    return admin.Actor.key(caller.key_id, caller.name, client[0] if client else None)


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body, option=orjson.OPT_UTC_Z), status_code=status, media_type="application/json")


def _key(view: admin.KeyView, now: datetime) -> dict[str, Any]:
    info = view.info
    return {"object": "api_key", "id": info.id, "name": info.name, "accounts": list(info.accounts),
            "scopes": list(info.scopes), "state": info.state(now), "created_at": info.created_at,
            "expires_at": info.expires_at, "revoked_at": info.revoked_at, "replaced_by": info.replaced_by,
            "models": list(view.models) if view.models is not None else None}


def _account(account: Account) -> dict[str, Any]:
    return {"id": account.id, "name": account.name, "created_at": account.created_at}


# -- accounts -----------------------------------------------------------------------------------
async def create_account(request: HandlerRequest) -> Response:
    body = request.body
    account = await _done(admin.create_account(request.services.database, _actor(request), body["id"],
                                               body.get("name", "")))
    return _json(_account(account), 201)


async def list_accounts(request: HandlerRequest) -> Response:
    found = await _done(admin.list_accounts(request.services.database))
    return _json({"object": "list", "data": [_account(a) for a in found]})


# -- keys ---------------------------------------------------------------------------------------
async def create_key(request: HandlerRequest) -> Response:
    body = request.body
    expires = body.get("expires_at")
    limits = body.get("limits") or {}
    new = await _done(admin.create_key(
        request.services.database, _actor(request), body["accounts"], body["name"], body["scopes"],
        _instant("expires_at", expires) if expires is not None else None, body.get("models"),
        _limit_columns(limits, ("body", "limits"))), within=("limits", limits))
    return await _new_key(request, new)


async def _new_key(request: HandlerRequest, new: Any, replaces: Any = None) -> Response:
    view = await _done(admin.get_key(request.services.database, new.info.id))
    now = datetime.now(UTC)
    body = {"object": "api_key.created", "key": new.key, "api_key": _key(view, now)}
    if replaces is not None:
        body["replaces"] = _key(await _done(admin.get_key(request.services.database, replaces.id)), now)
    return _json(body, 201)


async def list_keys(request: HandlerRequest) -> Response:
    account = QueryParams(request.scope["query_string"]).get("account")
    found = await _done(admin.list_keys(request.services.database, account))
    now = datetime.now(UTC)
    return _json({"object": "list", "data": [_key(view, now) for view in found]})


async def get_key(request: HandlerRequest) -> Response:
    view = await _done(admin.get_key(request.services.database, request.scope["path_params"]["key_id"]))
    return _json(_key(view, datetime.now(UTC)))


async def revoke_key(request: HandlerRequest) -> Response:
    key_id = request.scope["path_params"]["key_id"]
    await _done(admin.revoke_key(request.services.database, _actor(request), key_id))
    request.services.keys.forget(key_id)  # refused here at once; other gateways within their key cache
    return await get_key(request)


async def rotate_key(request: HandlerRequest) -> Response:
    key_id = request.scope["path_params"]["key_id"]
    old, new = await _done(admin.rotate_key(request.services.database, _actor(request), key_id,
                                            request.body["grace_seconds"], request.services.settings.key_cache_seconds))
    request.services.keys.forget(key_id)  # its grace's end, known here at once
    return await _new_key(request, new, replaces=old)


# -- limits -------------------------------------------------------------------------------------
def _subject(request: HandlerRequest) -> Subject:
    params = request.scope["path_params"]
    return Subject(KEY, params["key_id"]) if "key_id" in params else Subject(ACCOUNT, params["account_id"])


async def put_limits(request: HandlerRequest) -> Response:
    await _done(admin.set_limits(request.services.database, _actor(request), _subject(request),
                                 _limit_columns(request.body)))
    return await get_limits(request)


def _limit_columns(body: Mapping[str, Any], where: tuple[str, ...] = ("body",)) -> dict[str, Any]:
    """A body's limits (AdminLimitsUpdate, at `where` in the request) as the limits table's
    columns: `period` is `budget_period`, `budget_usd` in nano-dollars."""
    values: dict[str, Any] = {}
    for name, value in body.items():
        column = _FROM_HTTP.get(name, name)
        if column == UNITS["usd"].limit_column and value is not None:
            value = _nanos(value, [*where, name])
        values[column] = value
    return values


def _nanos(dollars: float | int, loc: list[str]) -> int:
    """US dollars as nano-dollars, exactly: a budget is kept to the nano-dollar, and an amount with
    more decimals than nine (a smaller part of a dollar than that, which it would round away, to
    nothing if it were all of it) is a 422 naming the field, as the contract says. (A JSON number
    reaches here as the shortest decimal that reads back as it: what the client wrote.)"""
    nanos = Decimal(str(dollars)) * NANOS_PER_USD
    if nanos != nanos.to_integral_value():
        raise errors.ValidationFailed([{"loc": loc, "msg": f"{loc[-1]} {dollars} has more than 9 decimals: a budget is "
                                        "kept to the nano-dollar", "type": "value_error", "input": dollars}],
                                      code="invalid_value")
    return int(nanos)


async def get_limits(request: HandlerRequest) -> Response:
    subject = _subject(request)
    engine = request.services.database
    found = (await _done(admin.limits_of(engine, subject))).get(subject) or Limits()
    used = await _done(consumption(engine, request.services.limiter.counters, subject, found))
    return _json({"object": "limits", "subject": subject.kind, "id": subject.id, "limits": _limit_values(found),
                  "consumption": [_use(row) for row in used]})


def _limit_values(found: Limits) -> dict[str, Any]:
    values: dict[str, Any] = {"rpm": found.rpm, "tpm": found.tpm, "concurrent": found.concurrent,
                              "budget_tokens": None, "budget_usd": None, "period": None,
                              "models": list(found.models) if found.models is not None else None,
                              "cache": found.cache}
    for budget in found.budgets:
        values[budget.unit.limit_column] = _amount(budget.unit.limit_column, budget.limit)
        values["period"] = budget.period
    return values


def _amount(limit: str, value: int | None) -> float | int | None:
    return usd(value) if value is not None and limit == UNITS["usd"].limit_column else value


def _use(row: Any) -> dict[str, Any]:
    value = (list(row.value) if isinstance(row.value, tuple) else row.value if isinstance(row.value, bool)
             else _amount(row.limit, row.value))
    return {"limit": row.limit, "value": value, "used": _amount(row.limit, row.used),
            "remaining": _amount(row.limit, row.remaining), "resets_in_seconds": row.resets_in,
            "resets_at": row.resets_at, "period": row.period, "source": row.source}


# -- prices -------------------------------------------------------------------------------------
async def put_price(request: HandlerRequest) -> Response:
    body = request.body
    rates = {name: body.get(name) for name in stored_prices.RATES}
    price = await _done(admin.set_price(request.services.database, _actor(request), body["model"], rates))
    await _done(_reread(request))  # this gateway at once; the others within limits_cache_seconds
    return _json(_price(body["model"], price))


async def list_prices(request: HandlerRequest) -> Response:
    prices = request.services.ledger.prices
    await _done(_reread(request))
    now = datetime.now(UTC)
    found = [(model, price) for model in prices.models() if (price := prices.price(model, now)) is not None]
    return _json({"object": "list", "data": [_price(model, price) for model, price in found]})


async def _reread(request: HandlerRequest) -> None:
    async with request.services.database.connect() as connection:
        request.services.ledger.prices.use_stored(await stored_prices.read(connection))


def _price(model: str, price: Price) -> dict[str, Any]:
    rates = price.rates
    return {"model": model, "input": stored_prices.usd_per_million(rates.input),
            "output": stored_prices.usd_per_million(rates.output),
            "cached_input": stored_prices.usd_per_million(rates.cached_input),
            "since": None if price.since.year == 1 else price.since, "source": price.source}


# -- the audit trail ----------------------------------------------------------------------------
async def audit(request: HandlerRequest) -> Response:
    since = QueryParams(request.scope["query_string"]).get("since")
    entries = await _done(admin.audit(request.services.database, _instant("since", since, "query") if since else None))
    return _json({"object": "list", "data": [
        {"id": e.id, "at": e.at, "actor": e.actor, "actor_key_id": e.actor_key_id, "address": e.address,
         "action": e.action, "object_kind": e.object_kind, "object_id": e.object_id, "detail": e.detail}
        for e in entries]})


def _instant(name: str, value: str, where: str = "body") -> datetime:
    try:
        return usage.parse_instant(value)
    except ValueError as exc:  # should the schema's date-time check and this parser ever disagree
        raise errors.ValidationFailed([{"loc": [where, name], "msg": str(exc), "type": "value_error",
                                        "input": value}]) from None
