"""The gateway's database: SQLite (one file, the default) or PostgreSQL (shared by several gateway
processes or hosts), through one SQLAlchemy async engine, its schema kept by alembic.

    sqlite:///var/gateway.db                     a file relative to the working directory
    sqlite:////srv/gateway/gateway.db            an absolute path
    postgresql://user:password@host:5432/name    PostgreSQL (driver: asyncpg)
    postgresql://...?sslmode=verify-full&sslrootcert=/etc/gateway/pg-ca.pem    over TLS (`postgres_tls`)

SQLite runs in WAL mode with `synchronous=FULL`: a committed ledger row survives a crash of the
process and of the machine, and readers (key lookups, usage reports) never wait for the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import URL, Connection, event, inspect, make_url, text
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from gateway.core.errors import ConfigError
from gateway.core.tls import client_context

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 5_000  # how long a writer waits for another process's write to finish
# Prepared statements kept per connection, by sqlite3 (128 by default) and by SQLAlchemy's asyncpg
# driver (100). The ledger's writer inserts batches of any size, each size a statement text of
# its own, and a prepared multi-row INSERT is large: the defaults held a great deal of memory
# under load (and as many plans in each PostgreSQL backend). Few slots keep memory flat; a statement
# prepared again costs one round trip, once per commit.
CACHED_STATEMENTS = 16
PG_CONNECT_TIMEOUT = 5.0  # seconds; asyncpg's own default (60 s) would hold a retry loop for a minute
# pg_advisory_xact_lock key serialising schema upgrades and first-start set-up across processes.
_PREPARE_LOCK = 0x67617465  # "gate"
_IMMEDIATE = "gateway_sqlite_immediate"


def engine_url(url: str) -> URL:
    """The SQLAlchemy URL of a `database_url` setting, with the async driver we ship."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"database_url is not a database URL: {exc}") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise ConfigError("database_url: SQLite needs a file (sqlite:///var/gateway.db); memory is not shared")
        return parsed.set(drivername="sqlite+aiosqlite")
    if backend == "postgresql":
        # (A URL that sets prepared_statement_cache_size itself keeps its own.)
        return parsed.set(drivername="postgresql+asyncpg").update_query_dict(
            {"prepared_statement_cache_size": parsed.query.get("prepared_statement_cache_size", str(CACHED_STATEMENTS))})
    raise ConfigError(f"database_url: unsupported database {backend!r} (use sqlite:/// or postgresql://)")


# libpq's TLS parameters, as a PostgreSQL URL gives them (asyncpg takes them only in its own DSN,
# and SQLAlchemy hands it keyword arguments): read here and given to asyncpg as its `ssl` argument.
TLS_PARAMETERS = ("sslmode", "sslrootcert", "sslcert", "sslkey")
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def postgres_tls(query: Mapping[str, Any]) -> ssl.SSLContext | str | None:
    """asyncpg's `ssl` argument for libpq's TLS parameters in a URL's query, with libpq's meaning:
    `disable`, `allow`, `prefer`, `require` (encrypted; the certificate checked only with
    `sslrootcert`, as libpq does, which makes it `verify-ca`), `verify-ca` (the certificate
    checked against `sslrootcert`, default the system's CAs, or `system`), `verify-full` (and the
    host name too); `sslcert` and `sslkey` a client certificate, for verify-ca and verify-full.
    None: the URL names none of them (asyncpg's default, libpq's `prefer`)."""
    given = {name: str(value[-1] if isinstance(value, tuple) else value) for name, value in query.items()
             if name in TLS_PARAMETERS}
    if not given:
        return None
    if "ssl" in query:
        raise ConfigError("database_url: give either asyncpg's ssl or libpq's sslmode, not both")
    rootcert = given.get("sslrootcert", "")
    mode = given.get("sslmode", "prefer")
    if mode not in SSL_MODES:
        raise ConfigError(f"database_url sslmode: {mode!r} is none of {', '.join(SSL_MODES)}")
    if mode == "require" and rootcert:
        mode = "verify-ca"  # libpq: "if a root CA file exists, ... the same way as if verify-ca was specified"
    if not mode.startswith("verify-"):
        if rootcert or given.get("sslcert") or given.get("sslkey"):
            raise ConfigError(f"database_url: sslrootcert, sslcert and sslkey need sslmode verify-ca or verify-full "
                              f"(with sslmode={mode} the server's certificate is not checked)")
        return mode  # asyncpg reads libpq's modes itself
    context = client_context(None if rootcert == "system" else rootcert, given.get("sslcert"), given.get("sslkey"),
                             names=("database_url sslrootcert", "database_url sslcert / sslkey"))
    # verify-ca checks the chain but not the name (libpq's meaning); verify-full both.
    context.check_hostname = mode == "verify-full"
    return context


def connect(url: str) -> AsyncEngine:
    """An engine for `url` (no connection is made yet)."""
    parsed = engine_url(url)
    if parsed.get_backend_name() == "sqlite":
        _private_file(Path(parsed.database))
        engine = create_async_engine(parsed, pool_pre_ping=True, connect_args={"cached_statements": CACHED_STATEMENTS})
        _sqlite_events(engine)
        return engine
    tls = postgres_tls(parsed.query)
    if tls is not None:
        parsed = parsed.difference_update_query(TLS_PARAMETERS)
    return create_async_engine(
        parsed,
        pool_pre_ping=True,  # a connection broken by a database restart is replaced, not used
        connect_args={"timeout": PG_CONNECT_TIMEOUT, "server_settings": {"application_name": "completions-gateway"},
                      **({"ssl": tls} if tls is not None else {})},
    )


def _private_file(path: Path) -> None:
    """Create the database file, and its directory, readable by the gateway's user only: they hold
    key digests and billing data. (SQLite gives its -wal and -shm files the same permissions.)
    Files and directories that exist already keep the permissions their owner chose."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass


def sqlite_pragmas(connection: Any) -> None:
    """Every SQLite connection's settings (the module's docstring says why), the engine's and the
    ledger writer's own (store/sqlite_writer.py)."""
    cursor = connection.cursor()
    for pragma in ("journal_mode=WAL", "synchronous=FULL", f"busy_timeout={SQLITE_BUSY_TIMEOUT_MS}", "foreign_keys=ON"):
        cursor.execute(f"PRAGMA {pragma}")
    cursor.close()


def _sqlite_events(engine: AsyncEngine) -> None:
    # The driver's own transaction handling neither wraps DDL in transactions nor lets us choose
    # BEGIN IMMEDIATE; SQLAlchemy's documented recipe: switch it off and emit BEGIN ourselves.
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None
        sqlite_pragmas(dbapi_connection)

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        immediate = connection.get_execution_options().get(_IMMEDIATE)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def dialect(name: str) -> Any:
    """SQLAlchemy's dialect `name` ("sqlite", "postgresql", or a driver's: "postgresql.asyncpg"),
    imported when first asked for: a gateway on SQLite never loads PostgreSQL's (and its memory)."""
    return importlib.import_module(f"sqlalchemy.dialects.{name}")


async def write_connection(engine: AsyncEngine) -> AsyncConnection:
    """A connection for write transactions. On SQLite they take the write lock at BEGIN (BEGIN
    IMMEDIATE): a deferred transaction that reads before it writes fails at once, without waiting,
    when another process wrote in between."""
    connection = await engine.connect()
    await connection.execution_options(**{_IMMEDIATE: True})
    return connection


class OwnConnection:
    """A background writer's own connection for its write transactions, kept between them: a pool
    checkout (with its ping) and return (with its rollback) around each batch doubled a commit's
    round trips (docs/performance.md). After a transaction that failed, unless `kept(exc)` says the
    error was the batch's own (the connection is sound), it is closed, and the next transaction opens
    a new one. A transaction that takes longer than `timeout` seconds fails."""

    def __init__(self, engine: AsyncEngine, timeout: float) -> None:
        self._engine, self._timeout = engine, timeout
        self._connection: AsyncConnection | None = None

    async def transaction(self, work: Callable[[AsyncConnection], Awaitable[Any]],
                          kept: Callable[[Exception], bool] = lambda exc: False) -> None:
        """`work` in one write transaction, committed when it returns."""
        if self._connection is None:
            self._connection = await write_connection(self._engine)
        try:
            async with asyncio.timeout(self._timeout), self._connection.begin():
                await work(self._connection)
        except Exception as exc:
            if not kept(exc):  # the connection may be broken
                await self.close()
            raise

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()


@contextlib.asynccontextmanager
async def writing(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A write transaction, committed when the block ends without an exception."""
    connection = await write_connection(engine)
    try:
        async with connection.begin():
            yield connection
    finally:
        await connection.close()


async def prepare(engine: AsyncEngine, then: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    """Upgrade the schema to the newest migration, then run `then` (first-start set-up) in the same
    transaction, holding a lock so that processes starting together do both exactly once."""
    async with writing(engine) as connection:
        if connection.dialect.name == "postgresql":
            await connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PREPARE_LOCK})
        await connection.run_sync(upgrade)
        return await then(connection)


def head_revision() -> str:
    """The newest migration's revision, read off the file names (`NNNN_what.py` holds revision
    "NNNN"; tests/integration/test_database.py checks this against alembic's own view), so that a gateway
    whose database is up to date never imports alembic, a good part of a worker's memory."""
    versions = resources.files("gateway.store.migrations").joinpath("versions")
    return max(name[:4] for name in (entry.name for entry in versions.iterdir())
               if name[:4].isdigit() and name.endswith(".py"))


def current_revision(connection: Connection) -> str | None:
    """The revision the database's schema is at (None: no schema yet)."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(connection: Connection) -> None:
    """alembic `upgrade head` on an open connection (inside its transaction); nothing to do, and
    alembic not imported, when the schema is at the head already."""
    if current_revision(connection) == head_revision():
        return
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", "gateway.store:migrations")
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
