"""Databases for tests, fuzzing and benchmarks, with accounts and keys made the way an operator
makes them: the `gateway` CLI (run in-process here, to stay fast; tests/integration/test_cli.py runs the real
console script).

    with sqlite_database() as db:              a fresh SQLite file, provisioned:
        db.url, db.key (grants acct-a), db.multi_key (grants acct-a and acct-b)
    with empty_database("postgresql") as url:  a fresh, empty database on the server named by
                                               GATEWAY_TEST_DATABASE_URL (or "sqlite")
    with migrated_database("sqlite") as url:   the same, with the gateway's tables
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
from sqlalchemy import make_url, select

from gateway.store import database
from gateway.store.tables import ledger
from tests.support.cli import gateway_cli

PG_URL_VARIABLE = "GATEWAY_TEST_DATABASE_URL"


@dataclass(frozen=True)
class TestDatabase:
    __test__ = False  # not a pytest test class

    url: str
    key: str  # grants acct-a
    multi_key: str  # grants acct-a and acct-b


def run_cli(url: str, *args: str) -> str:
    """`gateway ARGS...` on the database at `url`; its standard output. Fails on a non-zero exit."""
    result = gateway_cli(url, *args)
    assert result.returncode == 0, f"gateway {' '.join(args)} exited with {result.returncode}: {result.stderr}"
    return result.stdout


def create_key(url: str, *accounts: str) -> str:
    """A new key granting `accounts` (created if missing)."""
    existing = {a["id"] for a in json.loads(run_cli(url, "accounts", "list", "--format", "json"))}
    for account in accounts:
        if account not in existing:
            run_cli(url, "accounts", "create", account)
    created = run_cli(url, "keys", "create", *(f"--account={a}" for a in accounts), "--format", "json")
    return json.loads(created)["key"]


def new_key(url: str, account: str | None = None) -> tuple[str, str, str]:
    """(key, key id, account) of a new key of `account` (created if missing; default a new one)."""
    account = account or f"acct-{secrets.token_hex(4)}"
    if account not in {a["id"] for a in json.loads(run_cli(url, "accounts", "list", "--format", "json"))}:
        run_cli(url, "accounts", "create", account)
    created = json.loads(run_cli(url, "keys", "create", "--account", account, "--format", "json"))
    return created["key"], created["id"], account


def provision(url: str) -> TestDatabase:
    return TestDatabase(url, key=create_key(url, "acct-a"), multi_key=create_key(url, "acct-a", "acct-b"))


@contextlib.contextmanager
def empty_database(kind: str) -> Iterator[str]:
    """The URL of a new, empty database: "sqlite" (a temporary file) or "postgresql" (a database
    created on GATEWAY_TEST_DATABASE_URL's server and dropped afterwards)."""
    if kind == "sqlite":
        folder = Path(tempfile.mkdtemp(prefix="gateway-test-"))
        # An empty file is an empty SQLite database: the CLI administers it (it creates none itself).
        (folder / "gateway.db").touch(mode=0o600)
        try:
            yield f"sqlite:///{folder / 'gateway.db'}"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    server = postgres_server()
    assert server, postgres_unavailable()
    name = f"gateway_test_{secrets.token_hex(6)}"
    asyncio.run(_admin(server, f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextlib.contextmanager
def migrated_database(kind: str) -> Iterator[str]:
    """The URL of a new database of `kind` with the gateway's tables (its migrations run) and
    nothing in them: no account, no key."""
    with empty_database(kind) as url:
        async def migrate() -> None:
            engine = database.connect(url)
            try:
                await database.prepare(engine, _nothing)
            finally:
                await engine.dispose()

        asyncio.run(migrate())
        yield url


async def _nothing(connection: object) -> None:
    return None


@contextlib.contextmanager
def sqlite_database() -> Iterator[TestDatabase]:
    with empty_database("sqlite") as url:
        yield provision(url)


def postgres_server() -> str | None:
    """The PostgreSQL server URL tests may create databases on, or None when there is none (the
    reason is then in `postgres_unavailable`)."""
    return os.environ.get(PG_URL_VARIABLE) or None


def postgres_unavailable() -> str | None:
    """Why PostgreSQL tests cannot run here, or None when they can."""
    server = postgres_server()
    if server is None:
        return f"{PG_URL_VARIABLE} is not set (e.g. postgresql://postgres@127.0.0.1:5432/test)"
    try:
        asyncio.run(_admin(server, "SELECT 1"))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        return f"PostgreSQL at {make_url(server).render_as_string(hide_password=True)} is unreachable: {exc}"
    return None


async def _admin(server: str, statement: str) -> None:
    url = make_url(server).set(drivername="postgresql")
    connection = await asyncpg.connect(url.render_as_string(hide_password=False), timeout=5)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


def ledger_rows(url: str, account_id: str) -> list[dict]:
    """Every ledger row of an account, oldest first, read straight from the database."""

    async def read() -> list[dict]:
        engine = database.connect(url)
        try:
            async with engine.connect() as connection:
                query = select(ledger).where(ledger.c.account_id == account_id).order_by(ledger.c.started_at)
                return [dict(row._mapping) for row in await connection.execute(query)]
        finally:
            await engine.dispose()

    return asyncio.run(read())


def wait_for_rows(url: str, account_id: str, count: int, timeout: float = 15.0,
                  where: Callable[[dict], bool] | None = None) -> list[dict]:
    """The account's rows (those `where` accepts) once they record `count` requests (the writer
    commits in the background; a row of refused requests alike records `refusals` of them)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = [row for row in ledger_rows(url, account_id) if where is None or where(row)]
        if requests_in(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def requests_in(rows: list[dict], outcome: str | None = None) -> int:
    """How many requests `rows` record (of `outcome`, when given)."""
    return sum(row.get("refusals") or 1 for row in rows if outcome is None or row["outcome"] == outcome)


def ledger_row(url: str, account_id: str, request_id: str, timeout: float = 15.0) -> dict:
    """One request's row, once the writer has committed it."""
    deadline = time.monotonic() + timeout
    while True:
        found = [row for row in ledger_rows(url, account_id) if row["request_id"] == request_id]
        if found or time.monotonic() > deadline:
            assert found, f"no ledger row for {request_id} after {timeout}s"
            return found[0]
        time.sleep(0.05)


@contextlib.contextmanager
def writes_blocked(url: str) -> Iterator[None]:
    """Hold the ledger's write lock from outside the gateway: its writer waits, and rows pile up
    in its memory, until the block ends."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        connection = sqlite3.connect(parsed.database, isolation_level=None)
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            connection.execute("ROLLBACK")
            connection.close()
        return
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(10)

    connection = run(asyncpg.connect(parsed.set(drivername="postgresql").render_as_string(hide_password=False)))
    try:
        run(connection.execute("BEGIN; LOCK TABLE ledger IN EXCLUSIVE MODE"))
        yield
        run(connection.execute("ROLLBACK"))
    finally:
        run(connection.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


@contextlib.contextmanager
def postgres_down(url: str) -> Iterator[None]:
    """An outage of one PostgreSQL test database: new connections are refused and open ones cut."""
    name = make_url(url).database
    server = postgres_server()
    asyncio.run(_admin(server, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
    asyncio.run(_admin(server, f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"))
    try:
        yield
    finally:
        asyncio.run(_admin(server, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
