"""The database layer on SQLite and PostgreSQL: migrations, first start, the ledger writer's
handling of rows it cannot keep, and the time parser the usage filters share."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import insert, select, text

from gateway.store import database, sqlite_writer
from gateway.store.accounts import bootstrap
from gateway.store.ledger import Ledger
from gateway.store.tables import ledger, ledger_rejects, metadata
from gateway.store.usage import parse_instant
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import empty_database, ledger_rows, run_cli


def test_migrations_create_exactly_the_tables_the_code_queries(backend_kind):
    async def migrate(url: str) -> tuple[list, str | None]:
        engine = database.connect(url)
        try:
            for _ in range(2):  # a second start finds nothing to do
                await database.prepare(engine, bootstrap)
            async with engine.connect() as connection:
                diff = await connection.run_sync(
                    lambda c: compare_metadata(MigrationContext.configure(c, opts={"compare_type": True}), metadata))
                version = await connection.run_sync(lambda c: MigrationContext.configure(c).get_current_revision())
            return diff, version
        finally:
            await engine.dispose()

    with empty_database(backend_kind) as url:
        diff, version = asyncio.run(migrate(url))
    config = Config()
    config.set_main_option("script_location", "gateway.store:migrations")
    assert diff == []
    assert version == ScriptDirectory.from_config(config).get_current_head()


def test_keys_rotated_before_lineages_existed_join_their_chains_first_key(backend_kind):
    """Migration 0014: a chain of rotations made before it (a -> b -> c) counts as `a`, its first."""
    def at(connection, revision: str) -> None:
        from alembic import command

        config = Config()
        config.set_main_option("script_location", "gateway.store:migrations")
        config.attributes["connection"] = connection
        command.upgrade(config, revision)

    async def migrate(url: str) -> dict[str, str | None]:
        engine = database.connect(url)
        try:
            async with engine.begin() as connection:
                await connection.run_sync(lambda c: at(c, "0013"))
                now = datetime.now(UTC)
                for key, successor in (("key_c", None), ("key_b", "key_c"), ("key_a", "key_b"), ("key_z", None)):
                    await connection.execute(text(
                        "INSERT INTO api_keys (id, digest, name, created_at, scopes, replaced_by) "
                        "VALUES (:id, :digest, '', :now, 'inference', :successor)"),
                        {"id": key, "digest": key, "now": now, "successor": successor})
                await connection.run_sync(lambda c: at(c, "head"))
                rows = await connection.execute(text("SELECT id, lineage FROM api_keys"))
                return {row.id: row.lineage for row in rows}
        finally:
            await engine.dispose()

    with empty_database(backend_kind) as url:
        assert asyncio.run(migrate(url)) == {"key_a": None, "key_b": "key_a", "key_c": "key_a", "key_z": None}


def test_the_head_read_off_the_file_names_is_alembics_and_a_database_at_it_starts_without_alembic(tmp_path):
    config = Config()
    config.set_main_option("script_location", "gateway.store:migrations")
    assert database.head_revision() == ScriptDirectory.from_config(config).get_current_head()
    url = f"sqlite:///{tmp_path}/gateway.db"
    # A fresh interpreter: this one has imported alembic already.
    opened = ("import asyncio, sys\n"
              "from gateway.store import database\n"
              "async def main():\n"
              "    engine = database.connect(sys.argv[1])\n"
              "    async def nothing(connection): return None\n"
              "    await database.prepare(engine, nothing)\n"
              "    await engine.dispose()\n"
              "asyncio.run(main())\n"
              "print(sorted({m.split('.')[0] for m in sys.modules} & {'alembic', 'mako'}))\n")
    first, second = (subprocess.run([sys.executable, "-c", opened, url], capture_output=True, text=True, check=True)
                     for _ in range(2))
    assert first.stdout.strip() == "['alembic', 'mako']"  # an empty database: migrated
    assert second.stdout.strip() == "[]"  # at the head: nothing to import


def pasted(log: str, env: dict[str, str]) -> str:
    """What the curl line a gateway printed for people answers when pasted into a shell (bash, as
    a user's terminal runs it) with `env`."""
    (line,) = [line.strip() for line in log.splitlines() if line.strip().startswith("curl ")]
    run = subprocess.run(["bash", "-c", line], env={"PATH": os.environ["PATH"], **env}, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_first_start_creates_one_account_and_prints_its_key_once(backend_kind, upstream):
    """Two gateways starting together on an empty database: exactly one sets it up and prints the
    key, which works on both; the other starts on a database that is set up by then, as a restart
    does, and prints no key. The call each prints works when pasted into a shell: the first with
    the key written out, the restart's with the key in $KEY."""
    with empty_database(backend_kind) as url:
        # One vendor, the fake, which answers whatever model the printed call names.
        env = {name: value for name, value in gateway_env(upstream.url, url).items()
               if not name.startswith(("GATEWAY_VENDOR_DOWN_", "GATEWAY_VENDOR_RETRYING_", "GATEWAY_FALLBACKS"))}
        processes = [GatewayProcess(env), GatewayProcess(env)]
        starters = [threading.Thread(target=process.start) for process in processes]
        try:
            for starter in starters:
                starter.start()
            for starter in starters:
                starter.join(60)
            logs = "".join(process.log() for process in processes)
            keys = sorted(set(re.findall(r"sk-gw-[A-Za-z0-9_-]{43}", logs)))  # the key, and the call to paste
            assert len(keys) == 1 and logs.count("empty database") == 1, logs
            (announcer,) = [p for p in processes if "empty database" in p.log()]
            (restarted,) = [p for p in processes if p is not announcer]
            assert keys[0] not in restarted.log()
            for process, env in ((announcer, {}), (restarted, {"KEY": keys[0]})):
                answer = json.loads(pasted(process.log(), env))
                assert answer.get("object") == "text_completion", (answer, process.log())
            for process in processes:
                r = httpx.get(f"{process.url}/v5/usage", headers={"x-api-key": keys[0]}, verify=SHARED_TLS)
                assert r.status_code == 200 and r.json()["accounts"] == ["default"]
        finally:
            for process in processes:
                process.stop()
        assert [a["id"] for a in json.loads(run_cli(url, "accounts", "list", "--format", "json"))] == ["default"]
        assert len(json.loads(run_cli(url, "keys", "list", "--format", "json"))) == 1


def row(request_id: str, **values) -> dict:
    now = datetime.now(UTC)
    return {"request_id": request_id, "account_id": "acct", "key_id": "key_1", "vendor": "v", "model": "v/m",
            "prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3, "cached_tokens": None,
            "reasoning_tokens": None, "estimated": False, "outcome": "completed", "streamed": False,
            "end_user": None, "started_at": now, "ended_at": now, "ttft_ms": 1.0} | values


def test_a_row_the_database_refuses_is_set_aside_whole_and_does_not_hold_back_the_others(backend_kind, caplog):
    """Poisoned rows between good ones: each refused row lands in ledger_rejects (and the log), the
    good ones are written, and the writer goes on writing rows that come after."""

    async def write(url: str) -> int:
        engine = database.connect(url)
        try:
            await database.prepare(engine, bootstrap)
            ledger = Ledger(engine, max_pending=100)
            ledger.add(row("r-1"))
            ledger.add(row("r-null", outcome=None))  # NOT NULL: refused for what it is, on both databases
            ledger.add(row("r-huge", prompt_tokens=10**30, total_tokens=10**30 + 2))  # no column holds it
            ledger.add(row("r-negative", completion_tokens=-5))
            ledger.add(row("r-2", model="v/m\x00x", end_user="\x00"))  # PostgreSQL text cannot hold NUL
            ledger.add(row("r-1"))  # the same request again (a retried batch): stored once
            ledger.start()
            await ledger.drained()
            ledger.add(row("r-3", prompt_tokens=3_000_000_000, total_tokens=3_000_000_002))  # beyond int4: BIGINT
            await ledger.close()
            return ledger.rejected_rows
        finally:
            await engine.dispose()

    with empty_database(backend_kind) as url, caplog.at_level(logging.ERROR, logger="gateway.ledger"):
        rejected = asyncio.run(write(url))
        rows = {r["request_id"]: r for r in ledger_rows(url, "acct")}
        rejects = {r["request_id"]: r for r in rejected_rows(url)}
    assert sorted(rows) == ["r-1", "r-2", "r-3"] and rows["r-3"]["prompt_tokens"] == 3_000_000_000
    assert (rows["r-2"]["model"], rows["r-2"]["end_user"]) == ("v/m\ufffdx", "\ufffd")
    assert sorted(rejects) == ["r-huge", "r-negative", "r-null"] and rejected == 3
    assert "prompt_tokens is not a token count" in rejects["r-huge"]["reason"]
    assert json.loads(rejects["r-huge"]["row"])["prompt_tokens"] == 10**30  # kept whole, to replay
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert all(f'"request_id": "{name}"' in logged for name in rejects)


def rejected_rows(url: str) -> list[dict]:
    async def read() -> list[dict]:
        engine = database.connect(url)
        try:
            async with engine.connect() as connection:
                return [dict(r._mapping) for r in await connection.execute(select(ledger_rejects))]
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_the_writer_stores_a_row_as_sqlalchemy_would_and_sets_aside_a_naive_time(backend_kind):
    """The writer hands the driver its values itself (store/sqlite_writer.py, store/ledger.py): what it stores
    is what SQLAlchemy's own insert of the same row stores, value for value, as the driver reads it
    back (SQLite keeps times as text, which the usage reports cut into periods)."""
    at = datetime(2026, 11, 30, 23, 59, 59, tzinfo=timezone(timedelta(hours=-5)))  # not UTC, and no microseconds
    values = {"started_at": at, "ended_at": at + timedelta(microseconds=7), "end_user": "u", "cost_nanos": 12,
              "cached_tokens": 4, "fallback_from": "v/other", "deployment": "east", "estimated": True}

    async def write(url: str) -> list:
        engine = database.connect(url)
        try:
            await database.prepare(engine, bootstrap)
            writer = Ledger(engine, max_pending=100)
            writer.start()
            writer.add(row("by-writer", **values))
            writer.add(row("naive", started_at=datetime(2026, 11, 30, 12)))  # which zone? refused, not guessed
            await writer.close()
            async with database.writing(engine) as connection:
                await connection.execute(insert(ledger), [row("by-sqlalchemy", **values)])
            async with engine.connect() as connection:
                stored = (await connection.exec_driver_sql(
                    "SELECT * FROM ledger ORDER BY request_id")).fetchall()
            return [tuple(r) for r in stored]
        finally:
            await engine.dispose()

    with empty_database(backend_kind) as url:
        (by_sqlalchemy, by_writer), rejected = asyncio.run(write(url)), [r["request_id"] for r in rejected_rows(url)]
    assert by_writer[0] == "by-writer" and by_sqlalchemy[0] == "by-sqlalchemy"
    assert by_writer[1:] == by_sqlalchemy[1:]
    assert rejected == ["naive"]


def test_past_its_bound_the_buffer_logs_each_further_row_in_full(caplog):
    async def overflow(url: str) -> None:
        engine = database.connect(url)
        try:
            ledger = Ledger(engine, max_pending=2)  # no writer started: nothing drains the buffer
            for i in range(3):
                ledger.add(row(f"r-{i}"))
        finally:
            await engine.dispose()

    with empty_database("sqlite") as url, caplog.at_level(logging.ERROR, logger="gateway.ledger"):
        asyncio.run(overflow(url))
    (dropped,) = [r.getMessage() for r in caplog.records]
    assert "2 rows already wait for the database (ledger_buffer_rows)" in dropped and '"r-2"' in dropped


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-30T12:00:00Z", datetime(2026, 11, 30, 12, tzinfo=UTC)),
        ("2026-11-30t12:00:00.5z", datetime(2026, 11, 30, 12, 0, 0, 500_000, tzinfo=UTC)),
        ("2026-11-30T12:00:00.123456789+01:30", datetime(2026, 11, 30, 10, 30, 0, 123_456, tzinfo=UTC)),
        ("2026-12-31T23:59:60Z", datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)),  # a leap second
        ("0001-01-01T00:00:00+01:00", datetime.min.replace(tzinfo=UTC)),  # before year 1 in UTC
        ("9999-12-31T23:59:59-23:59", datetime.max.replace(tzinfo=UTC)),
        ("2026-11-30", datetime(2026, 11, 30, tzinfo=UTC)),  # the CLI's shorthands
        ("2026-11-30 08:15", datetime(2026, 11, 30, 8, 15, tzinfo=UTC)),
    ],
)
def test_instants_are_read_as_rfc_3339_in_utc(text, expected):
    assert parse_instant(text) == expected


@pytest.mark.parametrize("text", ["yesterday", "2026-02-30T00:00:00Z", "2026-11-30T24:00:00Z", "2026-11-30T12:00Z0"])
def test_what_is_not_an_instant_is_refused(text):
    with pytest.raises(ValueError):
        parse_instant(text)


def test_an_offset_moves_the_instant_not_the_clock():
    assert parse_instant("2026-11-30T00:30:00-01:00") - parse_instant("2026-11-30T01:30:00Z") == timedelta(0)


def test_few_prepared_statements_are_kept_per_postgresql_connection_unless_the_url_says():
    # The ledger's writer prepares a statement per batch size; the driver's default cache kept 100.
    assert database.engine_url("postgresql://u@h/db").query["prepared_statement_cache_size"] == str(
        database.CACHED_STATEMENTS)
    assert database.engine_url("postgresql://u@h/db?prepared_statement_cache_size=500").query[
        "prepared_statement_cache_size"] == "500"


def test_the_sqlite_writers_thread_runs_behind_the_event_loop(tmp_path):
    """Its thread's nice value is the process's plus NICENESS (store/sqlite_writer.py): a commit
    yields the core to the loop's requests."""
    writer = sqlite_writer.SqliteWriter(str(tmp_path / "ledger.db"))
    try:
        own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        theirs = writer._thread.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result()
        assert theirs == min(own + sqlite_writer.NICENESS, 19)
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own  # the loop's thread as it was
    finally:
        writer._thread.shutdown()
