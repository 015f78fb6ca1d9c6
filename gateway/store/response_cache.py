"""Where the response cache (gateway/http/cache.py) keeps its entries: bytes under a key, each for
its own time to live. Two stores with one interface:

- `MemoryStore`, this process's own: bounded by entries and by bytes (the least recently used go
  first), its time read from an injected clock;
- `RedisStore`, shared by every worker and host that names the same Redis (`GATEWAY_REDIS_URL`):
  Redis expires the entries itself (`SET ... PX`), and its memory policy bounds them.

Both refuse an entry larger than the per-entry bound. A store that fails is a miss, never a
failure: a Redis that is away, slow or answers an error makes `get` return None and `put` store
nothing (logged once per outage), so a request goes on to its vendor as if nothing was cached.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from gateway.store.resp import Redis

log = logging.getLogger("gateway.cache")

CONNECT_TIMEOUT = 0.5  # seconds; a cache that is away must cost a request little more than a miss
COMMAND_TIMEOUT = 0.5
RETRY_SECONDS = 1.0  # after a failure, Redis is left alone this long: requests meanwhile are misses at once


class Store(Protocol):
    remote: bool  # shared by other processes (a round trip), or this process's memory

    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl: float) -> bool:
        """Whether `value` was stored under `key` for `ttl` seconds."""

    @property
    def held_bytes(self) -> int | None:
        """The bytes this process holds (None: the store is not this process's)."""

    async def close(self) -> None: ...


class MemoryStore:
    """Entries in this process's memory, least recently used first out past `max_entries` or
    `max_bytes` (the bytes of keys and values); an entry past its time is gone when next read."""

    remote = False

    def __init__(self, max_entries: int, max_bytes: int, max_entry_bytes: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._max_entry_bytes = max_entry_bytes
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()  # key -> (expiry, value)
        self._bytes = 0

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str) -> bytes | None:
        found = self._entries.get(key)
        if found is None:
            return None
        expiry, value = found
        if self._clock() >= expiry:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return value

    async def put(self, key: str, value: bytes, ttl: float) -> bool:
        size = len(key) + len(value)
        if size > self._max_entry_bytes or size > self._max_bytes or ttl <= 0:
            return False
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (self._clock() + ttl, value)
        self._bytes += size
        while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
            self._drop(next(iter(self._entries)))
        return True

    def _drop(self, key: str) -> None:
        _, value = self._entries.pop(key)
        self._bytes -= len(key) + len(value)

    async def close(self) -> None:
        self._entries.clear()
        self._bytes = 0


class RedisStore:
    """Entries in Redis under `prefix` + "cache:" + key, expired by Redis."""

    remote = True
    held_bytes = None

    def __init__(self, url: str, prefix: str, max_entry_bytes: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # Its own connection, not the limits': a large entry on the wire must not hold up a claim.
        self._client = Redis(url, connect_timeout=CONNECT_TIMEOUT, timeout=COMMAND_TIMEOUT)
        self._prefix = f"{prefix}cache:"
        self._max_entry_bytes = max_entry_bytes
        self._clock = clock
        self._down = False  # logged once per outage
        self._retry_at = 0.0

    def _resting(self) -> bool:
        """Whether Redis failed a moment ago: then it is not asked (a Redis that is away would make
        every request wait for its connect timeout)."""
        return self._down and self._clock() < self._retry_at

    async def get(self, key: str) -> bytes | None:
        if self._resting():
            return None
        try:
            reply = await self._client.call("GET", self._prefix + key)
        except Exception as exc:
            self._failed(exc)
            return None
        self._back()
        return reply.encode() if isinstance(reply, str) else None

    async def put(self, key: str, value: bytes, ttl: float) -> bool:
        if len(key) + len(value) > self._max_entry_bytes or ttl <= 0 or self._resting():
            return False
        try:
            await self._client.call("SET", self._prefix + key, value, "PX", max(int(ttl * 1000), 1))
        except Exception as exc:
            self._failed(exc)
            return False
        self._back()
        return True

    def _failed(self, exc: BaseException) -> None:
        self._retry_at = self._clock() + RETRY_SECONDS
        if not self._down:
            self._down = True
            log.warning("response cache: Redis unavailable (%s); requests are served as misses until it is back",
                        f"{type(exc).__name__}: {exc}".splitlines()[0][:300])

    def _back(self) -> None:
        if self._down:
            self._down = False
            log.warning("response cache: Redis answers again")

    async def close(self) -> None:
        await self._client.close()
