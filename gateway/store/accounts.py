"""Accounts and API keys: what the CLI administers, and what every request's key is checked
against (store/key_cache.py) to find its `Caller` and the account the request is billed to.

A key is `sk-gw-` + 256 random bits, shown once when created; the database keeps only its SHA-256
digest and a public id (`key_…`) that lists, logs and ledger rows use instead. A key has scopes
(what it may call: SCOPES), may expire, and a rotation revokes it at the end of a grace period
(its `revoked_at` then lies in the future, and `replaced_by` names the new key). A key is only ever
compared by its digest: with 256 random bits a fast hash is as safe as a slow one and keeps the
per-request check cheap. (gateway/http/server/security.py plugs the check into Connexion.)
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.core.errors import BadRequest, PermissionDenied, clip
from gateway.store.tables import accounts, api_keys, key_accounts

DEFAULT_ACCOUNT = "default"
KEY_PREFIX = "sk-gw-"
# What a key may call; openapi.json names the scope each operation needs (http/server/security.py).
INFERENCE, USAGE, ADMIN = "inference", "usage", "admin"
SCOPES = (INFERENCE, USAGE, ADMIN)
DEFAULT_SCOPES = (INFERENCE, USAGE)  # what every key could do before scopes existed, and still does


KEY_BYTES = 32  # 256 random bits
# What new_key() makes: the prefix and the URL-safe base64 of KEY_BYTES bytes, unpadded.
_KEY_SHAPE = re.compile(rf"{KEY_PREFIX}[A-Za-z0-9_-]{{{-(-KEY_BYTES * 4 // 3)}}}")


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def looks_like_key(text: str) -> bool:
    """Whether `text` has the shape of a key this gateway makes (else no database is asked)."""
    return _KEY_SHAPE.fullmatch(text) is not None


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: the key's id (never the key), the accounts it grants, its name and scopes,
    and when it stops working (seconds since the epoch; checked on every request, since the cache
    keeps a key's answer for a while): `expires` (its expiry) or `ends` (its revocation: now or
    past, or the end of a rotation's grace, `replaced_by` naming the new key)."""

    key_id: str
    accounts: frozenset[str]
    name: str = ""
    scopes: frozenset[str] = frozenset(DEFAULT_SCOPES)
    expires: float | None = None
    ends: float | None = None
    # The subjects, ("key", id) or ("account", id), that had limits when the key was looked up: a
    # gateway's copy of the limits must hold them before the key is served (http/server/security.py).
    limited: frozenset[tuple[str, str]] = frozenset()
    replaced_by: str | None = None

    def account(self, selected: str | None) -> str:
        """The account a request is billed to, from the `x-selected-account-id` header."""
        if selected:
            if selected in self.accounts:
                return selected
            raise PermissionDenied(f"this key does not grant account '{clip(selected)}'", code="account_not_granted")
        if len(self.accounts) == 1:
            return next(iter(self.accounts))
        raise BadRequest(
            "this key grants several accounts: choose one with the x-selected-account-id header",
            code="account_required",
            param="x-selected-account-id",
        )

    def visible_accounts(self, selected: str | None) -> frozenset[str]:
        """The accounts a read (usage) may show: the selected one if granted, else every granted one."""
        return frozenset({self.account(selected)}) if selected else self.accounts


class KeyStore(Protocol):
    async def caller(self, key: str) -> Caller | None:
        """The caller a key belongs to (a revoked or expired key's too: it is told so), or None for
        an unknown key."""

    def forget(self, key_id: str) -> None:
        """Drop any cached answer for key `key_id` (it was just changed)."""


ACCOUNT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class AccountsError(Exception):
    """An administrative request that cannot be done as asked (an HTTP 422); `field` names the
    request's field at fault, when there is one."""

    def __init__(self, message: str, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.code = code


class UnknownObject(AccountsError):
    """No such account, key or model (an HTTP 404)."""


class Conflict(AccountsError):
    """The object's state forbids it: an account that exists, a key revoked already (an HTTP 409)."""


@dataclass(frozen=True, slots=True)
class Account:
    id: str
    name: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class KeyInfo:
    id: str
    name: str
    accounts: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None  # in the future while a rotated key's grace lasts
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    expires_at: datetime | None = None
    replaced_by: str | None = None

    def state(self, now: datetime) -> str:
        """"active", "expired", "revoked", or "rotating" (replaced, within its grace)."""
        if self.revoked_at is not None and self.revoked_at <= now:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "rotating" if self.revoked_at is not None else "active"


@dataclass(frozen=True, slots=True)
class NewKey:
    info: KeyInfo
    key: str  # the only place the key exists in the clear: print it once, never store it


async def create_account(connection: AsyncConnection, account_id: str, name: str = "") -> Account:
    if not ACCOUNT_ID.fullmatch(account_id):
        raise AccountsError(f"invalid account id {account_id!r}: 1-64 of letters, digits, '.', '_', '-', "
                            "starting with a letter or digit", field="id")
    exists = await connection.scalar(select(accounts.c.id).where(accounts.c.id == account_id))
    if exists:
        raise Conflict(f"account {account_id!r} already exists", field="id", code="already_exists")
    account = Account(account_id, name, _now())
    await connection.execute(insert(accounts).values(id=account.id, name=account.name, created_at=account.created_at))
    return account


async def list_accounts(connection: AsyncConnection, ids: Collection[str] | None = None) -> list[Account]:
    """Every account, or those of `ids` that exist, by id."""
    query = select(accounts).order_by(accounts.c.id)
    if ids is not None:
        query = query.where(accounts.c.id.in_(sorted(ids)))
    rows = await connection.execute(query)
    return [Account(r.id, r.name, r.created_at) for r in rows]


async def create_key(connection: AsyncConnection, account_ids: Sequence[str], name: str = "",
                     scopes: Sequence[str] = DEFAULT_SCOPES, expires_at: datetime | None = None,
                     lineage: str | None = None) -> NewKey:
    """A key; `lineage`: the first key of the rotation chain it joins (None: it starts one)."""
    wanted = sorted(set(account_ids))
    if not wanted:
        raise AccountsError("a key needs at least one account", field="accounts")
    granted = tuple(scope for scope in SCOPES if scope in set(scopes))
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown or not granted:
        raise AccountsError(f"unknown scope {', '.join(map(repr, unknown))}: choose from {', '.join(SCOPES)}"
                            if unknown else f"a key needs at least one scope: {', '.join(SCOPES)}", field="scopes")
    now = _now()
    if expires_at is not None and expires_at <= now:
        raise AccountsError(f"expires_at {expires_at.isoformat()} is not in the future", field="expires_at")
    found = set((await connection.scalars(select(accounts.c.id).where(accounts.c.id.in_(wanted)))).all())
    missing = [a for a in wanted if a not in found]
    if missing:
        raise UnknownObject(f"no such account: {', '.join(missing)} (create it first)", field="accounts",
                            code="unknown_account")
    key = new_key()
    info = KeyInfo(f"key_{secrets.token_hex(8)}", name, tuple(wanted), now, None, granted, expires_at)
    await connection.execute(
        insert(api_keys).values(id=info.id, digest=digest(key), name=name, created_at=info.created_at,
                                scopes=" ".join(granted), expires_at=expires_at, lineage=lineage)
    )
    await connection.execute(insert(key_accounts), [{"key_id": info.id, "account_id": a} for a in wanted])
    return NewKey(info, key)


async def list_keys(connection: AsyncConnection, account_id: str | None = None,
                    key_id: str | None = None) -> list[KeyInfo]:
    """Every key (or those granting `account_id`, or the one `key_id`), oldest first."""
    query = (
        select(api_keys.c.id, api_keys.c.name, api_keys.c.created_at, api_keys.c.revoked_at, api_keys.c.scopes,
               api_keys.c.expires_at, api_keys.c.replaced_by, key_accounts.c.account_id)
        .join(key_accounts, key_accounts.c.key_id == api_keys.c.id)
        .order_by(api_keys.c.created_at, api_keys.c.id, key_accounts.c.account_id)
    )
    if account_id is not None:
        granting = select(key_accounts.c.key_id).where(key_accounts.c.account_id == account_id)
        query = query.where(api_keys.c.id.in_(granting))
    if key_id is not None:
        query = query.where(api_keys.c.id == key_id)
    keys: dict[str, KeyInfo] = {}
    for r in await connection.execute(query):
        known = keys.get(r.id)
        grants = (*known.accounts, r.account_id) if known else (r.account_id,)
        keys[r.id] = KeyInfo(r.id, r.name, grants, r.created_at, r.revoked_at, tuple(r.scopes.split()),
                             r.expires_at, r.replaced_by)
    return list(keys.values())


async def get_key(connection: AsyncConnection, key_id: str) -> KeyInfo:
    found = await list_keys(connection, key_id=key_id)
    if not found:
        raise UnknownObject(f"no such key: {clip(key_id)!r}", field="key_id", code="unknown_key")
    return found[0]


async def revoke_key(connection: AsyncConnection, key_id: str) -> KeyInfo:
    """Revoke a key now (a rotated one too, before its grace ends). Running gateways stop accepting
    it within `key_cache_seconds`."""
    now = _now()
    revoked = await connection.execute(
        update(api_keys).where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None) | (api_keys.c.revoked_at > now))
        .values(revoked_at=now)
    )
    if revoked.rowcount == 0:
        await get_key(connection, key_id)  # unknown: UnknownObject
        raise Conflict(f"key {key_id!r} is already revoked", field="key_id", code="already_revoked")
    return await get_key(connection, key_id)


async def replace_key(connection: AsyncConnection, key_id: str, grace: timedelta) -> tuple[KeyInfo, NewKey]:
    """A rotation: a new key with the old one's accounts, name, scopes and expiry, in its lineage
    (its counters are the old one's: limits/rules.py counted_as); the old one is revoked when `grace` has
    passed. (Its limits are the caller's to copy: gateway/admin.py.) A key has one successor: of two
    rotations at once, the second is a Conflict."""
    old = await get_key(connection, key_id)
    now = _now()
    if old.state(now) != "active":
        raise _not_active(old, now)
    lineage = await connection.scalar(select(api_keys.c.lineage).where(api_keys.c.id == key_id))
    new = await create_key(connection, old.accounts, old.name, old.scopes, old.expires_at, lineage=lineage or key_id)
    # Only while it has no successor: a rotation that committed meanwhile (PostgreSQL lets both
    # read the key as active; this update waits for the other's commit, then finds no row) wins.
    replaced = await connection.execute(
        update(api_keys).where(api_keys.c.id == key_id, api_keys.c.replaced_by.is_(None),
                               api_keys.c.revoked_at.is_(None)).values(revoked_at=now + grace, replaced_by=new.info.id))
    if replaced.rowcount != 1:
        raise _not_active(await get_key(connection, key_id), now)
    return await get_key(connection, key_id), new


def _not_active(key: KeyInfo, now: datetime) -> Conflict:
    return Conflict(f"key {key.id!r} is {key.state(now)}" + (f" (replaced by {key.replaced_by})" if key.replaced_by
                                                              else "") + ": only an active key can be rotated",
                    field="key_id", code="not_active")


async def bootstrap(connection: AsyncConnection) -> NewKey | None:
    """On a database without accounts, create the `default` account and a key for it, so a fresh
    clone works out of the box. Returns the new key (to print once), or None."""
    if await connection.scalar(select(func.count()).select_from(accounts)):
        return None
    await create_account(connection, DEFAULT_ACCOUNT, "created on first start")
    # Never an admin key: it is printed where anyone reading the start's output sees it.
    return await create_key(connection, [DEFAULT_ACCOUNT], "created on first start", DEFAULT_SCOPES)


def _now() -> datetime:
    return datetime.now(UTC)
