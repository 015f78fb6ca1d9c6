"""A writer's own thread on SQLite, with a sqlite3 connection of its own, that takes a whole batch
in one call: BEGIN IMMEDIATE, the batch's statements, COMMIT. The ledger's (its rows and their
rollups, `write`) and the stored responses' (store/response_writer.py, `transaction`) each have one.

Why not the engine everything else uses: through SQLAlchemy's async engine every statement is a
trip to aiosqlite's thread and back (a cursor, the statement, closing the cursor), a commit is a
dozen statements, and the GIL changes hands at each trip, a cost paid on every commit whatever
the load (docs/performance.md has the figures). Here a commit is one trip.

What it keeps: the rows are inserted with ON CONFLICT DO NOTHING, and the rollups get only the
rows the insert wrote. Every row is normally new (ids are random), which the count of rows the
insert wrote confirms; when it falls short (a batch retried after an uncertain commit) the
transaction is redone a row at a time with RETURNING, which says which rows were new. Errors are
sqlite3's own: the ledger tells a refused row from an outage by them (store/ledger.py _refused);
after an outage the connection is closed and the next batch opens a new one.

The thread runs at a lower scheduling priority than the event loop's (`NICENESS` more): on a
busy core a commit (a millisecond or more of SQLite's work) otherwise held the core for a whole
time slice while a request waited for its loop. So the loop preempts it as soon as it has work,
and the writer still gets a share of a contended core larger than its rows need (what it took off
the request's latency, and that no row was lost under load: docs/performance.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from gateway.store import database, rollups
from gateway.store.tables import LEDGER_COLUMNS

_AT = [LEDGER_COLUMNS.index("started_at"), LEDGER_COLUMNS.index("ended_at")]
_INSERT = (f"INSERT INTO ledger ({', '.join(LEDGER_COLUMNS)}) VALUES ({', '.join('?' * len(LEDGER_COLUMNS))}) "
           "ON CONFLICT (request_id) DO NOTHING")


def sqlite_time(at: datetime) -> str:
    """An aware time as UTCDateTime's text on SQLite (store/tables.py)."""
    return at.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")


def values(row: dict[str, Any]) -> tuple[Any, ...]:
    """A ledger row as sqlite3 takes it: a column the row leaves out is NULL, and a time is
    UTCDateTime's text on SQLite (the ledger refused naive times before)."""
    found = list(map(row.get, LEDGER_COLUMNS))
    for i in _AT:
        found[i] = sqlite_time(found[i])
    return tuple(found)


NICENESS = 5  # added to the process's nice value for the writer's thread


def _behind_the_loop() -> None:
    """The writer's thread yields its core to the event loop (see the module's docstring)."""
    with contextlib.suppress(OSError):  # a system that refuses it still writes, as before
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + NICENESS)


class SqliteWriter:
    def __init__(self, path: str, name: str = "ledger") -> None:
        self._path = path
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"{name}-sqlite", initializer=_behind_the_loop)
        self._connection: sqlite3.Connection | None = None  # the thread's alone

    async def write(self, rows: list[dict[str, Any]]) -> None:
        """Insert ledger `rows` and add the new ones to the rollups, in one transaction."""
        await self.transaction(lambda connection: _ledger_rows(connection, rows))

    async def transaction(self, work: Callable[[sqlite3.Connection], None]) -> None:
        """`work` on the thread's connection, in one write transaction (committed when it returns)."""
        await asyncio.get_running_loop().run_in_executor(self._thread, self._transaction, work)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._close)
        self._thread.shutdown()

    def _transaction(self, work: Callable[[sqlite3.Connection], None]) -> None:
        if self._connection is None:
            self._connection = sqlite3.connect(self._path, isolation_level=None,
                                               cached_statements=database.CACHED_STATEMENTS)
            database.sqlite_pragmas(self._connection)
        connection = self._connection
        try:
            connection.execute("BEGIN IMMEDIATE")
            work(connection)
            connection.execute("COMMIT")
        except BaseException as exc:
            if connection.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    connection.execute("ROLLBACK")
            if not isinstance(exc, sqlite3.IntegrityError | sqlite3.DataError):
                self._close()  # it may be broken: the next batch opens a new one
            raise

    def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


def _ledger_rows(connection: sqlite3.Connection, rows: list[dict[str, Any]]) -> None:
    written = rows
    if connection.executemany(_INSERT, map(values, rows)).rowcount != len(rows):
        connection.execute("ROLLBACK")
        connection.execute("BEGIN IMMEDIATE")
        written = [row for row in rows if connection.execute(f"{_INSERT} RETURNING 1", values(row)).fetchone()]
    for sql, params in rollups.statements(written, "sqlite"):
        connection.executemany(sql, params)
