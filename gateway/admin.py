"""Administration: the one service behind both of its faces, the `gateway` command (gateway/cli.py,
gateway/limits_cli.py) and the HTTP API under /v5/admin/ (handlers/admin.py). Each change is one
transaction that also writes its line of the audit trail (`audit_log`): a change that fails leaves
nothing behind, not even its audit line, and no change is made without one.

The audit says who (`Actor`: a key by its public id and name, or the CLI and the OS user running
it), what (`action`), to which object, when and from which address; its `detail` is what was asked,
never a secret (a key appears by its public id only)."""

from __future__ import annotations

import getpass
import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.limits import table
from gateway.limits.rules import KEY, Limits, Subject, checked, whole
from gateway.store import accounts, database, stored_prices
from gateway.store.accounts import Account, AccountsError, KeyInfo, NewKey
from gateway.store.tables import audit_log

T = TypeVar("T")

MAX_GRACE_SECONDS = 30 * 86400  # the longest a rotated key may keep working beside its successor
AUDIT_PAGE = 1000  # lines an audit read returns at most (the oldest first: read on with `since`)


@dataclass(frozen=True, slots=True)
class Actor:
    """Who makes a change."""

    who: str  # "key key_… (name)" or "cli (user)"
    key_id: str | None = None
    address: str | None = None

    @classmethod
    def cli(cls) -> Actor:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no name for the uid (a container's user)
            user = "unknown user"
        return cls(f"cli ({user})")

    @classmethod
    def key(cls, key_id: str, name: str, address: str | None) -> Actor:
        return cls(f"key {key_id}" + (f" ({name})" if name else ""), key_id, address)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    at: datetime
    actor: str
    actor_key_id: str | None
    address: str | None
    action: str
    object_kind: str
    object_id: str
    detail: dict[str, Any]


async def _change(engine: AsyncEngine, actor: Actor, action: str, kind: str,
                  work: Callable[[AsyncConnection], Awaitable[T]],
                  described: Callable[[T], tuple[str, Mapping[str, Any]]]) -> T:
    """`work` and its audit line (`described(result)`: the object's id and the detail), one transaction."""
    async with database.writing(engine) as connection:
        result = await work(connection)
        object_id, detail = described(result)
        await connection.execute(insert(audit_log).values(
            at=datetime.now(UTC), actor=actor.who, actor_key_id=actor.key_id, address=actor.address, action=action,
            object_kind=kind, object_id=object_id, detail=json.dumps(detail, default=_jsonable, sort_keys=True)))
    return result


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, tuple | frozenset | set):
        return list(value)
    raise TypeError(f"{type(value).__name__} in an audit detail")


async def _read(engine: AsyncEngine, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    async with engine.connect() as connection:
        return await work(connection)


# -- accounts -----------------------------------------------------------------------------------
async def create_account(engine: AsyncEngine, actor: Actor, account_id: str, name: str = "") -> Account:
    return await _change(engine, actor, "account.create", "account",
                         lambda c: accounts.create_account(c, account_id, name),
                         lambda account: (account.id, {"name": account.name}))


async def list_accounts(engine: AsyncEngine) -> list[Account]:
    return await _read(engine, accounts.list_accounts)


# -- keys ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KeyView:
    """A key as administration shows it: never the key, and the allow-list of models it has."""

    info: KeyInfo
    models: tuple[str, ...] | None


async def create_key(engine: AsyncEngine, actor: Actor, account_ids: Sequence[str], name: str = "",
                     scopes: Sequence[str] = accounts.DEFAULT_SCOPES, expires_at: datetime | None = None,
                     models: Sequence[str] | None = None, with_limits: Mapping[str, Any] | None = None) -> NewKey:
    """A key, with its allow-list of models (its `models` limit) and its other limits (the fields
    `set_limits` takes; a None is no limit) when given: in force from its first request, since
    they are made in the key's own transaction."""
    wanted = {name: value for name, value in checked(with_limits or {}).items() if value is not None}
    if models is not None:
        if "models" in wanted:
            raise AccountsError("give the allow-list once: `models`, or the limits' `models`", field="models")
        wanted["models"] = checked({"models": list(models)})["models"]

    async def work(connection: AsyncConnection) -> NewKey:
        new = await accounts.create_key(connection, account_ids, name, scopes, expires_at)
        if wanted:
            await table.set_limits(connection, Subject(KEY, new.info.id), wanted)
        return new

    def described(new: NewKey) -> tuple[str, dict[str, Any]]:
        detail = {"accounts": new.info.accounts, "name": new.info.name, "scopes": new.info.scopes,
                  "expires_at": new.info.expires_at, "models": wanted.get("models")}
        if others := {name: value for name, value in wanted.items() if name != "models"}:
            detail["limits"] = others
        return new.info.id, detail

    return await _change(engine, actor, "key.create", "key", work, described)


async def list_keys(engine: AsyncEngine, account_id: str | None = None) -> list[KeyView]:
    async def work(connection: AsyncConnection) -> list[KeyView]:
        if account_id is not None and not await accounts.list_accounts(connection, [account_id]):
            raise accounts.UnknownObject(f"no such account: {account_id!r}", field="account", code="unknown_account")
        return await _views(connection, await accounts.list_keys(connection, account_id))

    return await _read(engine, work)


async def get_key(engine: AsyncEngine, key_id: str) -> KeyView:
    async def work(connection: AsyncConnection) -> KeyView:
        return (await _views(connection, [await accounts.get_key(connection, key_id)]))[0]

    return await _read(engine, work)


async def _views(connection: AsyncConnection, keys: list[KeyInfo]) -> list[KeyView]:
    known = await table.read_all(connection)
    return [KeyView(info, found.models if (found := known.get(Subject(KEY, info.id))) else None) for info in keys]


async def revoke_key(engine: AsyncEngine, actor: Actor, key_id: str) -> KeyInfo:
    return await _change(engine, actor, "key.revoke", "key", lambda c: accounts.revoke_key(c, key_id),
                         lambda info: (info.id, {}))


async def rotate_key(engine: AsyncEngine, actor: Actor, key_id: str, grace_seconds: int,
                     key_cache_seconds: float = 0) -> tuple[KeyInfo, NewKey]:
    """A new key in place of `key_id`, with its accounts, name, scopes, expiry, limits, allow-list
    and cache switch, sharing its counters (one budget); the old key works on until
    `grace_seconds` have passed, exactly, on every gateway whose key cache lives at most
    `key_cache_seconds` (store/key_cache.py): a grace between 0 and that cannot end exactly
    everywhere, so it is refused. 0 revokes the old key at once, as a revocation does."""
    seconds = whole(grace_seconds)
    if seconds is None or not 0 <= seconds <= MAX_GRACE_SECONDS:
        raise AccountsError(f"grace_seconds must be a whole number from 0 to {MAX_GRACE_SECONDS}",
                            field="grace_seconds")
    shortest = math.ceil(key_cache_seconds)
    if 0 < seconds < shortest:
        raise AccountsError(f"grace_seconds {seconds} is shorter than the gateways' key cache "
                            f"(GATEWAY_KEY_CACHE_SECONDS: {key_cache_seconds:g}), within which each hears of the "
                            f"rotation, so it could not end exactly: give at least {shortest}, or 0 to revoke the "
                            "old key at once (other gateways then refuse it within their key cache, as after a "
                            "revocation)", field="grace_seconds")
    grace_seconds = seconds

    async def work(connection: AsyncConnection) -> tuple[KeyInfo, NewKey]:
        old, new = await accounts.replace_key(connection, key_id, timedelta(seconds=grace_seconds))
        kept = await table.read_all(connection)
        if (found := kept.get(Subject(KEY, key_id))) is not None:
            await table.set_limits(connection, Subject(KEY, new.info.id), _columns(found))
        return old, new

    return await _change(engine, actor, "key.rotate", "key", work, lambda done: (done[0].id, {
        "replaced_by": done[1].info.id, "grace_seconds": grace_seconds, "revoked_at": done[0].revoked_at}))


def _columns(found: Limits) -> dict[str, Any]:
    """A subject's limits as the limits table's columns (what set_limits takes)."""
    values: dict[str, Any] = {"rpm": found.rpm, "tpm": found.tpm, "concurrent": found.concurrent,
                              "models": list(found.models) if found.models is not None else None,
                              "cache": found.cache}
    for budget in found.budgets:
        values[budget.unit.limit_column] = budget.limit
        values["budget_period"] = budget.period
    return {name: value for name, value in values.items() if value is not None}


# -- limits -------------------------------------------------------------------------------------
async def set_limits(engine: AsyncEngine, actor: Actor, subject: Subject, values: Mapping[str, Any]) -> Limits | None:
    """Set some limits of `subject` and clear others (a None value); those not named stay. Returns
    what applies afterwards (None: no limit at all)."""
    wanted = checked(values)
    cleared = [name for name, value in wanted.items() if value is None and name != "budget_period"]
    put = {name: value for name, value in wanted.items() if value is not None or name == "budget_period"}

    async def work(connection: AsyncConnection) -> Limits | None:
        left = await table.clear_limits(connection, subject, cleared) if cleared else None
        if put or not cleared:
            left = await table.set_limits(connection, subject, put)
            if left is not None and left.empty:  # nothing left of it: no row
                left = await table.clear_limits(connection, subject, None)
        return left

    return await _change(engine, actor, "limits.set", subject.kind, work, lambda left: (subject.id, dict(wanted)))


async def clear_limits(engine: AsyncEngine, actor: Actor, subject: Subject,
                       names: Sequence[str] | None) -> Limits | None:
    """Remove some limits of `subject`, or all of them (None)."""
    return await _change(engine, actor, "limits.clear", subject.kind,
                         lambda c: table.clear_limits(c, subject, names),
                         lambda left: (subject.id, {"cleared": list(names) if names is not None else "all"}))


async def limits_of(engine: AsyncEngine, subject: Subject | None = None) -> dict[Subject, Limits]:
    """Every subject's limits, or those of `subject` (checked to exist)."""
    async def work(connection: AsyncConnection) -> dict[Subject, Limits]:
        found = await table.read_all(connection)
        if subject is None:
            return found
        await table.check_subject(connection, subject)
        return {subject: found[subject]} if subject in found else {}

    return await _read(engine, work)


# -- prices -------------------------------------------------------------------------------------
async def set_price(engine: AsyncEngine, actor: Actor, model: str, usd_per_million: Mapping[str, Any]) -> Any:
    """A price for `model` from now on (USD per 1M tokens: input, output, cached_input)."""
    return await _change(engine, actor, "price.set", "price",
                         lambda c: stored_prices.store(c, model, usd_per_million),
                         lambda price: (model, {name: str(value) for name, value in usd_per_million.items()
                                                if value is not None} | {"since": price.since}))


# -- the audit trail ----------------------------------------------------------------------------
async def audit(engine: AsyncEngine, since: datetime | None = None, limit: int = AUDIT_PAGE) -> list[AuditEntry]:
    """The audit trail from `since` (inclusive), oldest first, at most `limit` lines."""
    query = select(audit_log).order_by(audit_log.c.at, audit_log.c.id).limit(limit)
    if since is not None:
        query = query.where(audit_log.c.at >= since)

    async def work(connection: AsyncConnection) -> list[AuditEntry]:
        return [AuditEntry(r.id, r.at, r.actor, r.actor_key_id, r.address, r.action, r.object_kind, r.object_id,
                           json.loads(r.detail)) for r in await connection.execute(query)]

    return await _read(engine, work)
