"""Accounts and API keys: what the CLI administers, and what every request's key is checked
against (DatabaseKeyStore) to find its `Caller` and the account the request is billed to.

A key is `sk-gw-` + 256 random bits, shown once when created; the database keeps only its SHA-256
digest and a public id (`key_…`) that lists, logs and ledger rows use instead. A key is only ever
compared by its digest: with 256 random bits a fast hash is as safe as a slow one and keeps the
per-request check cheap. (gateway/http/security.py plugs the check into Connexion.)
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.core.errors import BadRequest, PermissionDenied, StorageUnavailable, clip
from gateway.store.tables import accounts, api_keys, key_accounts

log = logging.getLogger("gateway.accounts")

DEFAULT_ACCOUNT = "default"
KEY_PREFIX = "sk-gw-"


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
    """Who is calling: the key's id (never the key) and the accounts it grants."""

    key_id: str
    accounts: frozenset[str]

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
        """The caller a key belongs to, or None for an unknown or revoked key."""


ACCOUNT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class AccountsError(Exception):
    """An administrative request that cannot be done (unknown account, duplicate id...)."""


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
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class NewKey:
    info: KeyInfo
    key: str  # the only place the key exists in the clear: print it once, never store it


async def create_account(connection: AsyncConnection, account_id: str, name: str = "") -> Account:
    if not ACCOUNT_ID.fullmatch(account_id):
        raise AccountsError(f"invalid account id {account_id!r}: 1-64 of letters, digits, '.', '_', '-', "
                            "starting with a letter or digit")
    exists = await connection.scalar(select(accounts.c.id).where(accounts.c.id == account_id))
    if exists:
        raise AccountsError(f"account {account_id!r} already exists")
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


async def create_key(connection: AsyncConnection, account_ids: Sequence[str], name: str = "") -> NewKey:
    wanted = sorted(set(account_ids))
    if not wanted:
        raise AccountsError("a key needs at least one account")
    found = set((await connection.scalars(select(accounts.c.id).where(accounts.c.id.in_(wanted)))).all())
    missing = [a for a in wanted if a not in found]
    if missing:
        raise AccountsError(f"no such account: {', '.join(missing)} (create it with `gateway accounts create`)")
    key = new_key()
    info = KeyInfo(f"key_{secrets.token_hex(8)}", name, tuple(wanted), _now(), None)
    await connection.execute(
        insert(api_keys).values(id=info.id, digest=digest(key), name=name, created_at=info.created_at)
    )
    await connection.execute(insert(key_accounts), [{"key_id": info.id, "account_id": a} for a in wanted])
    return NewKey(info, key)


async def list_keys(connection: AsyncConnection, account_id: str | None = None) -> list[KeyInfo]:
    query = (
        select(api_keys.c.id, api_keys.c.name, api_keys.c.created_at, api_keys.c.revoked_at, key_accounts.c.account_id)
        .join(key_accounts, key_accounts.c.key_id == api_keys.c.id)
        .order_by(api_keys.c.created_at, api_keys.c.id, key_accounts.c.account_id)
    )
    if account_id is not None:
        granting = select(key_accounts.c.key_id).where(key_accounts.c.account_id == account_id)
        query = query.where(api_keys.c.id.in_(granting))
    keys: dict[str, KeyInfo] = {}
    for r in await connection.execute(query):
        known = keys.get(r.id)
        grants = (*known.accounts, r.account_id) if known else (r.account_id,)
        keys[r.id] = KeyInfo(r.id, r.name, grants, r.created_at, r.revoked_at)
    return list(keys.values())


async def revoke_key(connection: AsyncConnection, key_id: str) -> None:
    """Revoke a key. Running gateways stop accepting it within `key_cache_seconds`."""
    revoked = await connection.execute(
        update(api_keys).where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None)).values(revoked_at=_now())
    )
    if revoked.rowcount == 0:
        exists = await connection.scalar(select(api_keys.c.id).where(api_keys.c.id == key_id))
        raise AccountsError(f"key {key_id!r} is already revoked" if exists else f"no such key: {key_id!r}")


async def bootstrap(connection: AsyncConnection) -> NewKey | None:
    """On a database without accounts, create the `default` account and a key for it, so a fresh
    clone works out of the box. Returns the new key (to print once), or None."""
    if await connection.scalar(select(func.count()).select_from(accounts)):
        return None
    await create_account(connection, DEFAULT_ACCOUNT, "created on first start")
    return await create_key(connection, [DEFAULT_ACCOUNT], "created on first start")


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class _Cached:
    caller: Caller | None
    expires: float


Lookup = Callable[[str], Awaitable[Caller | None]]


class KeyCache:
    """What a running gateway knows of keys: each database answer trusted for `ttl` seconds, so the
    per-request cost is a dict lookup.

    Valid keys and unknown ones are kept apart, each bounded and evicting its least recently used
    entry: a flood of made-up keys cycles through the small cache of unknown keys and never
    pushes out a valid key. A string that cannot be a key of ours (`looks_like_key`) is refused
    without asking the database or taking a place in either cache. While the database is
    unreachable, a key it has answered for before keeps its last answer; only a key never seen
    gets a 503."""

    LOOKUP_TIMEOUT = 3.0  # seconds a request may wait for the database to check its key

    def __init__(self, lookup: Lookup, ttl: float, *, max_known: int = 100_000, max_unknown: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lookup = lookup
        self._ttl = ttl
        self._clock = clock
        self._known: OrderedDict[str, _Cached] = OrderedDict()  # digest -> a valid key's caller
        self._unknown: OrderedDict[str, _Cached] = OrderedDict()  # digest -> None (unknown or revoked)
        self._limits = {id(self._known): max_known, id(self._unknown): max_unknown}
        # One lookup per digest at a time: a burst of requests with a cold key asks the database once.
        self._lookups: dict[str, asyncio.Task[Caller | None]] = {}

    async def caller(self, key: str) -> Caller | None:
        if not looks_like_key(key):
            return None
        key_digest = digest(key)
        cached = self._known.get(key_digest) or self._unknown.get(key_digest)
        if cached is not None and cached.expires > self._clock():
            if cached.caller is not None:
                self._known.move_to_end(key_digest)
            return cached.caller
        lookup = self._lookups.get(key_digest)
        if lookup is None:
            lookup = asyncio.ensure_future(self._lookup(key_digest))
            self._lookups[key_digest] = lookup
            lookup.add_done_callback(functools.partial(self._looked_up, key_digest))
        try:
            async with asyncio.timeout(self.LOOKUP_TIMEOUT):
                caller = await asyncio.shield(lookup)
        except Exception as exc:  # any failure to ask the database means the same to the caller
            if cached is not None:
                log.warning("database unavailable (%s); key %s keeps its cached answer", _reason(exc),
                            cached.caller.key_id if cached.caller else "(unknown key)")
                return cached.caller
            log.warning("database unavailable (%s): cannot check an API key", _reason(exc))
            raise StorageUnavailable("cannot check the API key: the gateway's database is unavailable",
                                     code="database_unavailable") from None
        self._known.pop(key_digest, None)
        self._unknown.pop(key_digest, None)
        self._remember(self._known if caller is not None else self._unknown, key_digest, caller)
        return caller

    def _remember(self, cache: OrderedDict[str, _Cached], key_digest: str, caller: Caller | None) -> None:
        cache[key_digest] = _Cached(caller, self._clock() + self._ttl)
        if len(cache) > self._limits[id(cache)]:
            cache.popitem(last=False)

    def _looked_up(self, key_digest: str, lookup: asyncio.Task[Caller | None]) -> None:
        self._lookups.pop(key_digest, None)
        if not lookup.cancelled():
            lookup.exception()  # retrieved here so that a lookup every waiter gave up on is not reported


class DatabaseKeyStore(KeyCache):
    """The KeyStore of a running gateway: a KeyCache in front of the database."""

    def __init__(self, engine: AsyncEngine, ttl: float) -> None:
        super().__init__(functools.partial(_lookup, engine), ttl)


async def _lookup(engine: AsyncEngine, key_digest: str) -> Caller | None:
    query = (
        select(api_keys.c.id, key_accounts.c.account_id)
        .join(key_accounts, key_accounts.c.key_id == api_keys.c.id)
        .where(api_keys.c.digest == key_digest, api_keys.c.revoked_at.is_(None))
    )
    async with engine.connect() as connection:
        rows = (await connection.execute(query)).all()
    if not rows:
        return None
    return Caller(rows[0].id, frozenset(r.account_id for r in rows))


def _reason(exc: BaseException) -> str:
    return "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"[:300]
