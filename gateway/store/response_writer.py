"""The stored responses' writer: a response is kept off the request's path, as the ledger's rows
are (store/ledger.py). An answer hands its response to `keep`, which only notes it; one task per
process commits everything noted since its last commit in one transaction, at most every
COMMIT_INTERVAL (two INSERT statements per batch, whatever its size: store/responses.py
`save_many`).

Why: one write transaction per answer, in the answer's path, cost a plain /v5/responses four to
eight times chat's gateway CPU and serialized requests on SQLite's one writer
(docs/performance.md#responses-beside-chat).

What it keeps of the store's guarantees, in this process:
- A response is retrievable as soon as its answer reached the client: a retrieve finds it among
  the pending ones (`pending`), and a read that needs its rows (input items, a chain, a delete)
  first awaits the commit of that id (`flushed`), an event, never a sleep.
- A stream is kept once, at its end (or `incomplete` when its client left), not `in_progress` at
  its start: a response is retrievable once it has ended (docs/responses.md says so).
Another worker process of the same gateway sees a response once it is committed, at most
COMMIT_INTERVAL (plus the commit) after its answer; docs/responses.md says so too.

A failing database does not fail the answers: the responses stay pending (and retrievable here)
and the writer retries with backoff; `close()` writes what is pending at shutdown, and logs the
id of what it could not. Memory is bounded: past MAX_PENDING responses waiting, a further one is
not kept (logged at ERROR with its id), as the ledger drops rows past its buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store import database
from gateway.store.responses import ResponseStore

log = logging.getLogger("gateway")


@dataclass(slots=True)
class Pending:
    """A response noted for the next commit, and the event its commit sets."""

    account_id: str
    response: dict[str, Any]
    input_items: Sequence[dict[str, Any]]
    now: datetime
    committed: asyncio.Event = field(default_factory=asyncio.Event)


class ResponseWriter:
    COMMIT_INTERVAL = 0.05  # seconds between commits at most, as the ledger's
    RETRY_FIRST, RETRY_MAX = 0.1, 5.0  # seconds between attempts while the database fails
    CLOSE_TIMEOUT = 10.0  # seconds shutdown keeps retrying before it logs what is left
    MAX_PENDING = 10_000  # responses waiting for a commit (a database away for a while)

    def __init__(self, engine: AsyncEngine, store: ResponseStore) -> None:
        self._engine, self.store = engine, store
        self._pending: dict[str, Pending] = {}  # by response id, in the order noted
        self._writing: dict[str, Pending] = {}  # the batch being committed
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def keep(self, account_id: str, response: dict[str, Any], input_items: Sequence[dict[str, Any]],
             now: datetime) -> None:
        """Note `response` (the wire object) and the input it was given for the next commit;
        nothing when it says `store: false`. A later note of the same id replaces an earlier one
        not yet committed (the store's `save` replaces a committed one)."""
        if response.get("store") is False:
            return
        if len(self._pending) + len(self._writing) >= self.MAX_PENDING and response["id"] not in self._pending:
            log.error("response %s not stored: %d responses already wait for the database", response["id"],
                      self.MAX_PENDING)
            return
        self._pending[response["id"]] = Pending(account_id, response, input_items, now)
        self._wake.set()

    def pending(self, account_id: str, response_id: str) -> dict[str, Any] | None:
        """The response of this id noted and not yet committed, if it is this account's."""
        found = self._pending.get(response_id) or self._writing.get(response_id)
        if found is None or found.account_id != account_id:
            return None
        return found.response

    async def flushed(self, account_id: str, response_id: str) -> None:
        """Return once nothing of this account under this id waits to be committed (at once when
        nothing does): a read of the database then finds it."""
        while (found := self._pending.get(response_id) or self._writing.get(response_id)) is not None:
            if found.account_id != account_id:
                return  # another account's id reads as unknown, as in the store
            await found.committed.wait()

    async def _commit(self) -> None:
        batch = self._writing
        async with database.writing(self._engine) as connection:
            await self.store.save_many(connection, [(p.account_id, p.response, p.input_items, p.now)
                                                    for p in batch.values()])
        self._writing = {}
        for pending in batch.values():
            pending.committed.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self.RETRY_FIRST
        while True:
            await self._wake.wait()
            self._wake.clear()
            began = loop.time()
            self._take()
            try:
                await self._commit()
                delay = self.RETRY_FIRST
            except Exception as exc:  # kept pending (and retrievable here); tried again
                log.warning("storing %d responses failed, retrying in %.1fs: %s", len(self._writing), delay,
                            f"{type(exc).__name__}: {exc}".splitlines()[0])
                self._wake.set()
                await asyncio.sleep(delay)  # backoff against a failing database, not synchronisation
                delay = min(delay * 2, self.RETRY_MAX)
                continue
            # At most one commit per interval: what arrives meanwhile joins the next batch.
            await asyncio.sleep(max(0.0, self.COMMIT_INTERVAL - (loop.time() - began)))

    def _take(self) -> None:
        """Move what is pending into the batch being written (after a failed commit, the batch
        keeps what it held, newer notes of the same ids replacing older ones)."""
        self._writing.update(self._pending)
        self._pending = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="response-writer")

    async def close(self) -> None:
        """Stop the writer, then write what is pending, retrying for up to CLOSE_TIMEOUT."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._take()
        if not self._writing:
            return
        try:
            async with asyncio.timeout(self.CLOSE_TIMEOUT):
                while True:
                    try:
                        await self._commit()
                        return
                    except Exception as exc:
                        log.warning("storing %d responses at shutdown failed: %s", len(self._writing), exc)
                        await asyncio.sleep(self.RETRY_FIRST)
        except TimeoutError:
            log.error("responses not stored at shutdown: %s", ", ".join(self._writing))
