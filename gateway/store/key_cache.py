"""What a running gateway knows of API keys (`KeyCache`; `DatabaseKeyStore` in front of the
database): each answer of the database trusted for `ttl` seconds, so that a request's key costs a
dict lookup, and when an answer stops being trusted.

An answer is trusted for `ttl` seconds from the moment it was asked for, on the monotonic clock
and on the keys' wall clock (`wall_clock`, the one a key's expiry and a rotation's grace end are
checked against: http/server/security.py) alike. So a rotation whose grace is at least `ttl`
(gateway/admin.py) ends exactly on every gateway: whatever a gateway knew of the key from before the
rotation is asked for again before the grace ends, and the answer carries the grace's end, which
each request checks against the same clock."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.core.errors import StorageUnavailable
from gateway.store.accounts import Caller, digest, looks_like_key
from gateway.store.tables import api_keys, key_accounts, limits

log = logging.getLogger("gateway.accounts")


def wall_clock() -> float:
    """The keys' clock, seconds since the epoch: expiries, a rotation's grace, and how long an
    answer is trusted on it (tests/support/clocked_gateway.py moves it)."""
    return time.time()


@dataclass(slots=True)
class _Cached:
    caller: Caller | None
    expires: float  # on the monotonic clock
    wall_expires: float  # on the keys' wall clock


Lookup = Callable[[str], Awaitable[Caller | None]]


class KeyCache:
    """Valid keys and unknown ones are kept apart, each bounded and evicting its least recently
    used entry: a flood of made-up keys cycles through the small cache of unknown keys and never
    pushes out a valid key. A string that cannot be a key of ours (`looks_like_key`) is refused
    without asking the database or taking a place in either cache. While the database is
    unreachable, a key it has answered for before keeps its last answer; only a key never seen
    gets a 503."""

    LOOKUP_TIMEOUT = 3.0  # seconds a request may wait for the database to check its key

    def __init__(self, lookup: Lookup, ttl: float, *, max_known: int = 100_000, max_unknown: int = 10_000,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] | None = None) -> None:
        self._lookup = lookup
        self._ttl = ttl
        self._clock = clock
        self._wall = wall or (lambda: wall_clock())  # (read at each call: a test may move the module's)
        self._known: OrderedDict[str, _Cached] = OrderedDict()  # digest -> a valid key's caller
        self._unknown: OrderedDict[str, _Cached] = OrderedDict()  # digest -> None (unknown)
        self._limits = {id(self._known): max_known, id(self._unknown): max_unknown}
        # One lookup per digest at a time: a burst of requests with a cold key asks the database
        # once. With it, when it was asked for (both clocks): its answer is trusted from then.
        self._lookups: dict[str, tuple[asyncio.Task[Caller | None], float, float]] = {}

    async def caller(self, key: str) -> Caller | None:
        if not looks_like_key(key):
            return None
        key_digest = digest(key)
        cached = self._known.get(key_digest) or self._unknown.get(key_digest)
        if cached is not None and cached.expires > self._clock() and cached.wall_expires > self._wall():
            if cached.caller is not None:
                self._known.move_to_end(key_digest)
            return cached.caller
        asked = self._lookups.get(key_digest)
        if asked is None:
            lookup = asyncio.ensure_future(self._lookup(key_digest))
            asked = self._lookups[key_digest] = (lookup, self._clock(), self._wall())
            lookup.add_done_callback(functools.partial(self._looked_up, key_digest))
        lookup, since, wall_since = asked
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
        cache = self._known if caller is not None else self._unknown
        cache[key_digest] = _Cached(caller, since + self._ttl, wall_since + self._ttl)
        if len(cache) > self._limits[id(cache)]:
            cache.popitem(last=False)
        return caller

    def forget(self, key_id: str) -> None:
        """Drop what this cache knows of key `key_id` (revoked or rotated through this gateway: it
        hears of it at once, the others within `ttl`). A scan: administration is rare."""
        for key_digest in [d for d, cached in self._known.items() if cached.caller and cached.caller.key_id == key_id]:
            del self._known[key_digest]

    def _looked_up(self, key_digest: str, lookup: asyncio.Task[Caller | None]) -> None:
        self._lookups.pop(key_digest, None)
        if not lookup.cancelled():
            lookup.exception()  # retrieved here so that a lookup every waiter gave up on is not reported


class DatabaseKeyStore(KeyCache):
    """The KeyStore of a running gateway: a KeyCache in front of the database."""

    def __init__(self, engine: AsyncEngine, ttl: float) -> None:
        super().__init__(functools.partial(_lookup, engine), ttl)


async def _lookup(engine: AsyncEngine, key_digest: str) -> Caller | None:
    # A revoked or expired key is found too: its holder hears which key it is and since when.
    query = (
        select(api_keys.c.id, api_keys.c.name, api_keys.c.scopes, api_keys.c.expires_at, api_keys.c.revoked_at,
               api_keys.c.replaced_by, key_accounts.c.account_id,
               select(limits.c.subject_id).where(limits.c.subject == "key", limits.c.subject_id == api_keys.c.id)
               .exists().label("limited"),
               select(limits.c.subject_id).where(limits.c.subject == "account",
                                                 limits.c.subject_id == key_accounts.c.account_id)
               .exists().label("account_limited"))
        .join(key_accounts, key_accounts.c.key_id == api_keys.c.id)
        .where(api_keys.c.digest == key_digest)
    )
    async with engine.connect() as connection:
        rows = (await connection.execute(query)).all()
    if not rows:
        return None
    first = rows[0]
    limited = {("account", r.account_id) for r in rows if r.account_limited}
    if first.limited:
        limited.add(("key", first.id))
    return Caller(first.id, frozenset(r.account_id for r in rows), first.name, frozenset(first.scopes.split()),
                  first.expires_at.timestamp() if first.expires_at else None,
                  first.revoked_at.timestamp() if first.revoked_at else None, frozenset(limited), first.replaced_by)


def _reason(exc: BaseException) -> str:
    return "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"[:300]
