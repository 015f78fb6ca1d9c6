"""The stored responses' writer: a response is kept off the request's CPU path, as the ledger's
rows are (store/ledger.py), yet durable before its client has the answer. An answer hands its
response to `keep`, which only notes it, then awaits `stored`; one task per process commits
continuously, group commit: a batch starts as soon as the previous one ends, with everything noted
meanwhile, in one transaction (three statements per batch, each executed over its rows, whatever
the batch's size: store/responses.py `statements`). No timer: an idle writer commits a lone
response at once, a busy one gathers the answers that arrived during its last commit.

How it commits is the ledger's way (store/ledger.py): on SQLite a batch is one call to a thread
with a sqlite3 connection of its own (store/sqlite_writer.py); on PostgreSQL the driver's SQL on
a connection of the writer's own (database.OwnConnection). Through SQLAlchemy's async engine and
aiosqlite, a transaction of a lone response (a client waiting for each answer before the next
leaves nothing to batch) was a dozen trips to aiosqlite's thread, several times a chat request's
whole CPU (docs/performance.md#responses-beside-chat). A commit that hangs counts as failed after
WRITE_TIMEOUT, and is retried.

Why one transaction per batch: one per answer cost a plain /v5/responses four to eight times chat's
gateway CPU and serialized requests on SQLite's one writer
(docs/performance.md#responses-beside-chat). Why the answer awaits its batch where the database is
`shared` (PostgreSQL, or several workers on one SQLite file): a client chaining
`previous_response_id` at once (the OpenAI Agents SDK does) may reach another worker or host,
which only sees what is committed; a timer-batched writer answered before the commit and such a
client could meet a 404. Where no other process reads the database (one worker on SQLite), the
wait would buy nothing another reader could see: the answer goes out once noted, this process's
reads find it pending, and the writer commits at most every COMMIT_INTERVAL, as the ledger does
(sooner when a read here needs the rows: `flushed`); what a SIGKILL can lose is what it had not
committed yet, as for the ledger's rows (docs/performance.md#the-ledger-under-a-hard-kill). A
client waiting for each answer then no longer makes every answer a transaction of its own.

- In this process, a response is also found among the pending ones (`pending`), and a read that
  needs its rows (input items, a chain, a delete) first awaits the commit of that id (`flushed`):
  events, never a sleep.
- A stream is kept once, at its end (or `incomplete` when its client left), not `in_progress` at
  its start; its terminal event is written once it is stored (http/response_events.py).

A failing database does not fail the answers. An answer waits for its commit at most COMMIT_WAIT,
then goes out anyway, logged at ERROR with its id: availability over a guarantee the database
cannot give (another worker may then not find it until the database is back; this worker still
does). The response stays pending and the writer retries with backoff; `close()` writes what is
pending at shutdown, and logs the id of what it could not. Memory is bounded: past MAX_PENDING
responses waiting, a further one is not kept (logged at ERROR with its id), as the ledger drops rows
past its buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store import database
from gateway.store.responses import ResponseStore, statements
from gateway.store.sqlite_writer import SqliteWriter

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
    COMMIT_WAIT = 2.0  # seconds an answer waits for its commit before it goes out anyway (logged)
    COMMIT_INTERVAL = 0.05  # seconds between commits where no answer waits for one (not shared), as the ledger's
    RETRY_FIRST, RETRY_MAX = 0.1, 5.0  # seconds between attempts while the database fails
    CLOSE_TIMEOUT = 10.0  # seconds shutdown keeps retrying before it logs what is left
    MAX_PENDING = 10_000  # responses waiting for a commit (a database away for a while)
    CLOSE_THREAD = 3.0  # seconds shutdown waits for SQLite's thread (stuck in a write that hung)
    WRITE_TIMEOUT = 15.0  # seconds a commit may take before it counts as failed (and is retried)

    def __init__(self, engine: AsyncEngine, store: ResponseStore, *, shared: bool = True) -> None:
        """`shared`: other processes read the database (see the module)."""
        self.store = store
        self._shared = shared
        sqlite = engine.dialect.name == "sqlite"
        self._sqlite = SqliteWriter(engine.url.database, "responses") if sqlite else None
        self._connection = database.OwnConnection(engine, self.WRITE_TIMEOUT)  # (where no SQLite thread is)
        self._pending: dict[str, Pending] = {}  # by response id, in the order noted
        self._writing: dict[str, Pending] = {}  # the batch being committed
        self._wake = asyncio.Event()
        self._hurry = asyncio.Event()  # a read awaits a commit: a paced writer commits at once
        self._task: asyncio.Task[None] | None = None

    def keep(self, account_id: str, response: dict[str, Any], input_items: Sequence[dict[str, Any]],
             now: datetime) -> Pending | None:
        """Note `response` (the wire object) and the input it was given for the next commit, and
        return the note for `stored`; nothing when it says `store: false`. A later note of the same
        id replaces an earlier one not yet committed, with the same event (the store's `save`
        replaces a committed one)."""
        if response.get("store") is False:
            return None
        earlier = self._pending.get(response["id"])
        if len(self._pending) + len(self._writing) >= self.MAX_PENDING and earlier is None:
            log.error("response %s not stored: %d responses already wait for the database", response["id"],
                      self.MAX_PENDING)
            return None
        noted = Pending(account_id, response, input_items, now)
        if earlier is not None:
            noted.committed = earlier.committed
        self._pending[response["id"]] = noted
        self._wake.set()
        return noted

    async def stored(self, noted: Pending | None) -> None:
        """Return once `noted` is committed (at once for nothing noted, or where no other process
        reads the database), or after COMMIT_WAIT: the answer then goes out without it, logged,
        rather than wait on a database that is away."""
        if noted is None or not self._shared or noted.committed.is_set():
            return
        try:
            async with asyncio.timeout(self.COMMIT_WAIT):
                await noted.committed.wait()
        except TimeoutError:
            log.error("response %s answered before it was stored: no commit within %.1fs (kept pending, retried)",
                      noted.response["id"], self.COMMIT_WAIT)

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
            self._hurry.set()  # a paced writer commits now
            await found.committed.wait()

    async def _commit(self) -> None:
        batch = self._writing
        entries = [(p.account_id, p.response, p.input_items, p.now) for p in batch.values()]
        if self._sqlite is not None:
            saving = statements(entries, "sqlite")
            async with asyncio.timeout(self.WRITE_TIMEOUT):
                await self._sqlite.transaction(lambda connection: _execute(connection, saving))
        else:
            await self._connection.transaction(lambda connection: self.store.save_many(connection, entries))
        self._writing = {}
        for pending in batch.values():
            pending.committed.set()

    async def _run(self) -> None:
        delay = self.RETRY_FIRST
        while True:
            # Group commit: what was noted during the last commit has set the event, so the next
            # batch starts at once with all of it.
            await self._wake.wait()
            self._wake.clear()
            self._take()
            started = time.monotonic()
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
            if not self._shared:  # nobody waits for the commit: gather COMMIT_INTERVAL's answers, as the ledger
                await self._paced(self.COMMIT_INTERVAL - (time.monotonic() - started))

    async def _paced(self, seconds: float) -> None:
        """Wait `seconds` before the next commit, or until a read in this process needs one (`flushed`)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(seconds, 0)):
                await self._hurry.wait()
        self._hurry.clear()

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
        try:
            if self._writing:
                await self._commit_before_closing()
        finally:
            await self._connection.close()
            sqlite, self._sqlite = self._sqlite, None  # (a later commit takes the engine's way)
            if sqlite is not None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.CLOSE_THREAD):
                        await sqlite.close()

    async def _commit_before_closing(self) -> None:
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


def _execute(connection: sqlite3.Connection, saving: list[tuple[str, list[tuple[Any, ...]]]]) -> None:
    for sql, rows in saving:
        connection.executemany(sql, rows)
