"""The periodic purge of stored responses past their retention (store/responses.py `purge`), run by
the gateway while it serves (gateway/services.py). Expired responses are answered as not found
already; the purge is what removes their rows, so that what an operator promised to delete is
deleted. Every gateway process purges: a purge is idempotent and batched, so several at once only
find less to do. The clock is injected (`clock`), so a test moves time instead of waiting."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store import database
from gateway.store.responses import ResponseStore

log = logging.getLogger("gateway")

BATCH = 1000  # responses removed per transaction (a short one each, however large the backlog)


class ResponsePurge:
    def __init__(self, engine: AsyncEngine, store: ResponseStore, interval: float,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._engine, self._store, self._interval, self._clock = engine, store, interval, clock
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> int:
        """Remove every response expired by the clock's now; how many."""
        now, removed = self._clock(), 0
        while True:
            async with database.writing(self._engine) as connection:
                done = await self._store.purge(connection, now, batch=BATCH)
            removed += done
            if done < BATCH:
                return removed

    async def _loop(self) -> None:
        while True:
            try:
                if removed := await self.run_once():
                    log.info("purged %d stored responses past their retention", removed)
            except Exception as exc:  # the database away: the next round tries again
                log.warning("purging stored responses failed: %s", f"{type(exc).__name__}: {exc}".splitlines()[0])
            await asyncio.sleep(self._interval)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="response-purge")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
