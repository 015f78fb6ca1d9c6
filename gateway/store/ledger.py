"""The usage ledger: one row per completion request that reached a vendor, written off the
request's path by one background writer per process. Rows come from each request's meter
(store/meter.py).

Durability, in the order things can go wrong:
- Rows wait in memory until the writer commits them. The writer commits everything pending in
  one statement (group commit), at most every COMMIT_INTERVAL, so a hard kill (SIGKILL,
  OOM) loses only the rows answered since the last commit began (docs/operations.md#storage says
  how much; tests/integration/test_ledger_durability.py measures it).
- A failing database does not fail requests: rows stay in memory and the writer retries with
  backoff, /readyz reports `degraded`, and the log says why. Past `ledger_buffer_rows` waiting
  rows, each further row is logged at ERROR in full (JSON; no key, only the key's id) and dropped.
- A row the database refuses for what it holds (not an outage: the database still answers) is
  kept whole in the `ledger_rejects` table and logged in full, so that it never blocks the rows
  behind it; `rejected_rows` counts them. Values a column cannot hold are caught before the
  database is asked.
- Graceful shutdown (SIGTERM): once the server has finished its requests, `close()` writes every
  pending row, retrying for up to CLOSE_TIMEOUT seconds; a row still unwritten is logged in full.
Rows are keyed by request id and inserted with ON CONFLICT DO NOTHING, so a batch retried after an
uncertain commit is never counted twice; the rows the insert wrote are added to the rollups
(store/rollups.py) in the same transaction, so the rollups count exactly the rows there are. On
SQLite, a batch goes through a thread and a connection of the writer's own (store/sqlite_writer.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import sqlite3
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, text
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, StatementError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.core import observe
from gateway.store import database, rollups
from gateway.store.meter import ESTIMATE_TIMEOUT, Estimate, Meter, counted
from gateway.store.prices import Prices
from gateway.store.sqlite_writer import SqliteWriter
from gateway.store.tables import LEDGER_COLUMNS, ledger, ledger_rejects

log = logging.getLogger("gateway.ledger")

class Ledger:
    BATCH_ROWS = 500  # rows per INSERT statement; a commit takes everything pending
    RETRY_FIRST, RETRY_MAX = 0.1, 5.0  # seconds between attempts while the database fails
    CLOSE_TIMEOUT = 10.0  # seconds shutdown keeps retrying before it logs what is left
    # A commit that hangs (a database that stopped answering) counts as failed after this long:
    # retried like any failure, and visible in readiness. Retrying is safe (ON CONFLICT DO NOTHING).
    WRITE_TIMEOUT = 15.0
    # At most one commit per this many seconds. A commit costs the event loop noticeable CPU
    # (SQLAlchemy's async path), so committing each row as it comes taxed every request at
    # low concurrency; rows that arrive meanwhile join the next batch. It adds at most this much
    # to the loss window of a hard kill (SIGTERM loses nothing).
    COMMIT_INTERVAL = 0.05
    ESTIMATE_TIMEOUT = ESTIMATE_TIMEOUT  # seconds counting an estimate may take (store/meter.py)
    PROBE_TIMEOUT = 3.0  # seconds for the database to answer "are you there?" after a failed write

    def __init__(self, engine: AsyncEngine, max_pending: int, prices: Prices | None = None) -> None:
        self._engine = engine
        self.prices = prices or Prices.load()  # what the meters price their rows with
        self._max_pending = max_pending
        self._pending: deque[dict[str, Any]] = deque()
        # The rows of refused requests still waiting for the writer, by what they have in common:
        # a refusal like one of them counts in that row (`refusals`) instead of a row of its own.
        self._refusing: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()  # set while nothing waits for the writer
        self._drained.set()
        self._counting: set[asyncio.Task[None]] = set()
        self._writer: asyncio.Task[None] | None = None
        self._connection = database.OwnConnection(engine, self.WRITE_TIMEOUT)  # the writer's own
        self._closing = False
        self._close_deadline = 0.0  # set by close()
        self._closed = False
        self._failing_since: float | None = None
        self._failure = ""
        self.rejected_rows = 0  # rows the database refused since start, kept in ledger_rejects
        # On SQLite, a thread and a connection of the writer's own take each batch in one call.
        self._sqlite = SqliteWriter(engine.url.database) if engine.dialect.name == "sqlite" else None

    def meter(self, *, request_id: str, account_id: str, key_id: str) -> Meter:
        return Meter(self, request_id, account_id, key_id, self.prices)

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write_forever(), name="ledger-writer")

    @property
    def pending_rows(self) -> int:
        """Rows waiting for the writer (in memory; the database has not taken them yet)."""
        return len(self._pending)

    async def drained(self) -> None:
        """Until the writer has written (or set aside) every row added so far."""
        await self._drained.wait()

    def not_ready(self) -> str | None:
        """None while rows are being written, else what is wrong (shown by /readyz)."""
        if self._writer is not None and self._writer.done() and not self._closing:
            return "the ledger writer stopped; see the log"
        if self._failing_since is None:
            return None
        seconds = time.monotonic() - self._failing_since
        return f"database unavailable for {seconds:.0f}s ({self._failure}); {len(self._pending)} ledger rows waiting"

    def add(self, row: dict[str, Any]) -> bool:
        """Whether the row waits for the writer now (else it is lost, and logged)."""
        observe.current().ledger_row(row)  # its tokens were used, whether or not the row can be written
        if self._closed:
            _lost("the ledger is closed", row)
        elif len(self._pending) >= self._max_pending:
            _lost(f"{len(self._pending)} rows already wait for the database (ledger_buffer_rows)", row)
        else:
            self._pending.append(_clean(row))
            observe.current().ledger_pending(len(self._pending))
            self._drained.clear()
            self._wake.set()
            return True
        return False

    def refuse(self, row: dict[str, Any]) -> None:
        """A refused request's row (no tokens, no cost): counted in a waiting row of the same
        account, key, model, endpoint, end user and minute when there is one. A flood of refused
        requests costs a row per writer batch, not a row each, and reports count every one."""
        started: datetime = row["started_at"]
        alike = (row["account_id"], row["key_id"], row["model"], row["endpoint"], row["end_user"], row["streamed"],
                 started.replace(second=0, microsecond=0))
        waiting = self._refusing.get(alike)
        if waiting is not None:
            observe.current().ledger_row(row)
            waiting["refusals"] += 1
            return
        row["refusals"] = 1
        if self.add(row):  # (_clean keeps the row itself)
            self._refusing[alike] = row

    def estimate(self, row: dict[str, Any], estimate: Estimate) -> asyncio.Task[dict[str, Any]]:
        """Count the tokens (off the event loop, bounded in time: meter.counted), then add the row:
        the task doing it, whose result is the row as written."""
        task = asyncio.get_running_loop().create_task(self._count(row, estimate))
        self._counting.add(task)
        task.add_done_callback(self._counting.discard)
        return task

    async def _count(self, row: dict[str, Any], estimate: Estimate) -> dict[str, Any]:
        prompt, completion = await counted(estimate, self.ESTIMATE_TIMEOUT, f"the row of {row['request_id']}")
        row = row | {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                     "cost_nanos": estimate.cost(prompt, completion)}
        self.add(row)
        return row

    async def close(self) -> None:
        """Write every pending row (graceful shutdown), then stop."""
        if self._counting:
            await asyncio.gather(*self._counting, return_exceptions=True)
        self._closing = True
        self._close_deadline = time.monotonic() + self.CLOSE_TIMEOUT
        self._wake.set()
        if self._writer is not None:
            await self._writer
        await self._connection.close()
        if self._sqlite is not None:  # (its thread may be stuck in a write that hung: not waited for long)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.PROBE_TIMEOUT):
                    await self._sqlite.close()
        self._closed = True
        while self._pending:
            _lost(f"shutdown: the database did not take it within {self.CLOSE_TIMEOUT:.0f}s", self._pending.popleft())

    async def _write_forever(self) -> None:
        delay = self.RETRY_FIRST
        while True:
            if not self._pending:
                self._drained.set()
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = list(itertools.islice(self._pending, self.BATCH_ROWS))
            self._refusing.clear()  # the rows taken are written as they are now
            started = time.monotonic()
            try:
                await self._write(batch)
            except Exception as exc:
                self._failed(exc)
                if self._closing and time.monotonic() + delay > self._close_deadline:
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.RETRY_MAX)
                continue
            for _ in batch:
                self._pending.popleft()
            observe.current().ledger_pending(len(self._pending))
            delay = self.RETRY_FIRST
            if self._failing_since is not None:
                log.warning("ledger: database is back after %.1fs; %d rows still waiting",
                            time.monotonic() - self._failing_since, len(self._pending))
                self._failing_since = None
            if not self._closing:
                await asyncio.sleep(self.COMMIT_INTERVAL - (time.monotonic() - started))

    async def _write(self, rows: list[dict[str, Any]]) -> None:
        """Insert `rows`, setting aside (`_reject`) each row the database refuses for what it holds.
        Raises when the database is away: the writer then retries the whole batch later."""
        checked = [(row, _invalid(row)) for row in rows]
        refused = [(row, why) for row, why in checked if why]
        rows = [row for row, why in checked if not why]
        try:
            if rows:
                await self._insert_rows(rows)
            rows = []
        except Exception as exc:
            if not _refused(exc) and not await self._database_answers():
                raise  # the database is away: the writer retries the batch
            # The database is there, so something in the batch is refused for what it is: write
            # the rows one by one and set aside only the ones refused (an outage meanwhile raises,
            # and the whole batch is retried; rows written already are not written twice).
        for row in rows:
            try:
                await self._insert_rows([row])
            except Exception as exc:
                if not _refused(exc) and not await self._database_answers():
                    raise
                refused.append((row, _reason(exc)))
        if refused:
            await self._reject(refused)

    async def _database_answers(self) -> bool:
        """Whether the database answers at all, on a connection of its own (a refused row's
        error and an outage's can look alike: asyncpg reports both as DBAPIError)."""
        try:
            async with asyncio.timeout(self.PROBE_TIMEOUT), self._engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
            return True
        except Exception:
            return False

    async def _reject(self, refused: list[tuple[dict[str, Any], str]]) -> None:
        """Keep refused rows in `ledger_rejects`, whole, as JSON: a row no longer blocks the ones
        behind it, and what it billed can still be found and replayed. Logged in full as well."""
        now = datetime.now(UTC)
        self.rejected_rows += len(refused)
        entries = [{"request_id": str(row.get("request_id"))[:64], "reason": why, "row": _json(row), "rejected_at": now}
                   for row, why in refused]
        for row, why in refused:
            log.error("ledger row refused by the database (%s), kept in ledger_rejects: %s", why, _json(row))
        try:
            await self._insert_into(ledger_rejects, entries)
        except Exception as exc:
            for row, why in refused:
                _lost(f"refused ({why}); ledger_rejects failed too ({_reason(exc)})", row)

    async def _insert_rows(self, rows: list[dict[str, Any]]) -> None:
        if self._sqlite is not None:
            async with asyncio.timeout(self.WRITE_TIMEOUT):
                await self._sqlite.write(rows)
            return

        async def write(connection: AsyncConnection) -> None:
            # One statement of arrays, one per column, whatever the batch's size (SQLAlchemy's
            # per-value processing and a statement of every batch size were most of the writer's
            # time), which returns the ids it wrote: only those count in the rollups.
            columns = tuple(zip(*(tuple(map(row.get, LEDGER_COLUMNS)) for row in rows), strict=True))
            written = {request_id for request_id, in await connection.exec_driver_sql(_pg_insert(), columns)}
            await rollups.add(connection, (row for row in rows if row["request_id"] in written))

        await self._transaction(write)

    async def _insert_into(self, table: Any, rows: list[dict[str, Any]]) -> None:
        await self._transaction(lambda connection: connection.execute(insert(table), rows))

    async def _transaction(self, work: Callable[[AsyncConnection], Awaitable[Any]]) -> None:
        # The writer keeps its own connection between commits (database.OwnConnection); the loss
        # window on a hard kill is a commit long. A refused row leaves the connection sound.
        await self._connection.transaction(work, kept=_refused)

    def _failed(self, exc: Exception) -> None:
        reason = _reason(exc)
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.error("ledger: cannot write to the database (%s); %d rows wait in memory, retrying",
                      reason, len(self._pending))
        elif reason != self._failure:
            log.error("ledger: database still failing (%s); %d rows waiting", reason, len(self._pending))
        self._failure = reason


@functools.cache
def _pg_insert() -> str:
    """The ledger's INSERT on PostgreSQL: an array per column (built once; SQLite's writer never asks)."""
    types = [column.type.compile(dialect=database.dialect("postgresql").dialect()) for column in ledger.columns]
    arrays = ", ".join(f"${i}::{kind}[]" for i, kind in enumerate(types, 1))
    return (f"INSERT INTO ledger ({', '.join(LEDGER_COLUMNS)}) SELECT * FROM unnest({arrays}) "
            "ON CONFLICT (request_id) DO NOTHING RETURNING request_id")


def _refused(exc: Exception) -> bool:
    """A row's own fault (bad data, broken constraint), as opposed to a database that is away."""
    if isinstance(exc, DataError | IntegrityError | sqlite3.DataError | sqlite3.IntegrityError):
        return True
    return isinstance(exc, StatementError) and not isinstance(exc, DBAPIError)  # failed binding a value


# Token counts and the cost must fit the columns (BIGINT); the adapters already refuse a vendor's nonsense.
_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens", "reasoning_tokens", "cost_nanos")
_NULLABLE = ("cached_tokens", "reasoning_tokens", "cost_nanos")
_MAX_COUNT = 2**63 - 1


def _invalid(row: dict[str, Any]) -> str | None:
    """Why the database would refuse `row` for its values, found before it is asked (SQLite's
    driver raises OverflowError on a large integer instead of an error of the row)."""
    for name in ("started_at", "ended_at"):
        value = row.get(name)
        if not isinstance(value, datetime) or value.tzinfo is None:
            return f"{name} is not an aware datetime: {str(value)[:40]}"
    for name in _COUNTS:
        value = row.get(name)
        if value is None and name in _NULLABLE:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _MAX_COUNT:
            return f"{name} is not a {'cost' if name == 'cost_nanos' else 'token count'}: {str(value)[:40]}"
    return None


def _json(row: dict[str, Any]) -> str:
    return json.dumps(row, default=str, sort_keys=True)


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    # PostgreSQL text cannot hold NUL, and the model name and `user` come from the client: one
    # such row would otherwise be refused. Replaced on both databases, so both keep the same text.
    row.setdefault("endpoint", "completions")  # (the column's default, which an INSERT naming it does not apply)
    for name in ("vendor", "model", "end_user"):
        value = row.get(name)
        if isinstance(value, str) and "\x00" in value:
            row[name] = value.replace("\x00", "\ufffd")
    return row


def _lost(why: str, row: dict[str, Any]) -> None:
    log.error("ledger row NOT written (%s): %s", why, _json(row))
    observe.current().ledger_dropped(1)


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
