"""Usage reports at scale: ten million ledger rows, then `GET /v5/usage` for a month, timed through a
running gateway, on SQLite and on PostgreSQL, beside the raw GROUP BY that reports were before the
rollups. Also what keeping the rollups costs the ledger's writer, in CPU time per row.

    python -m bench.usage_scale [--rows 10000000] [--backends sqlite,postgresql] [--repeat 15]
                                [--reuse URL ... [--rebuild]] [--keep DIR]
                                [--reports-only | --writer-only]

Loading ten million rows takes minutes of CPU: `--keep DIR` keeps what a run loads, the SQLite
file in DIR and the PostgreSQL database on its server (its URL is printed, and written to
DIR/postgresql.url), and `--reuse URL` times a kept database again (sqlite:////DIR/usage-bench.db
or the printed postgresql://... URL); a kept PostgreSQL database is dropped by hand
(`DROP DATABASE name`).

The rows (one month, 2026-11, in time order as a ledger fills) spread over 20 accounts of uneven
size, 3 keys and 250 users per account (30% of requests without `user`), 8 models of which one is
unpriced, and every outcome. They are bulk-loaded (sqlite3 executemany / asyncpg COPY), then the
rollups are built with `rollups.rebuild`, as a migration of a big ledger would. PostgreSQL gets a
database of its own on the server of GATEWAY_TEST_DATABASE_URL (default
postgresql://postgres@127.0.0.1:5432/test), dropped at the end unless --keep. Timings are wall-clock per request
over loopback (median and p90 of --repeat rounds, the variants interleaved round-robin so machine
noise hits each alike), with the gateway process's CPU time per request beside them (on SQLite it
includes the database's work, on PostgreSQL the server's own processes do that part); the
writer's cost is process CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import secrets
import signal
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
from sqlalchemy import func, make_url, select

from gateway.store import database, rollups
from gateway.store.accounts import bootstrap
from gateway.store.ledger import Ledger
from gateway.store.prices import Prices
from gateway.store.tables import ledger, metadata, rollup_tables
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import create_key, empty_database

MONTH = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
ACCOUNTS = [f"acct-{i:02d}" for i in range(20)]
MODELS = ["anthropic/claude-sonnet-5-5", "gemini/gemini-2.5-flash", "openai/gpt-3.5-turbo-instruct",
          "anthropic/claude-haiku-4-5", "gemini/gemini-3.8-flash", "vllm/llama-3.1-8b-instruct",
          "anthropic/claude-opus-5", "local/smollm2-135m"]
OUTCOMES = ["completed"] * 960 + ["client_disconnected"] * 15 + ["vendor_error"] * 10 + ["rejected"] * 10 \
    + ["timeout"] * 3 + ["gateway_error"] * 2
COLUMNS = [c.name for c in ledger.columns]
# The columns `generate` fills, in its tuples' order; the ledger's others (nullable) stay null.
FIELDS = ["request_id", "account_id", "key_id", "vendor", "model", "fallback_from", "prompt_tokens",
          "completion_tokens", "total_tokens", "cached_tokens", "reasoning_tokens", "estimated", "outcome",
          "streamed", "end_user", "started_at", "ended_at", "ttft_ms", "cost_nanos"]
CHUNK = 200_000
# The report variants timed: (name, all accounts or the biggest one, query parameters)
VARIANTS = [
    ("one account, per model", False, {"group_by": "model"}),
    ("all accounts, per model", True, {"group_by": "model"}),
    ("all accounts, per day", True, {"group_by": "day"}),
    ("all accounts, per key and outcome", True, {"group_by": "key,outcome"}),
    ("one account, per user", False, {"group_by": "user"}),
    ("all accounts, per user", True, {"group_by": "user"}),
    ("all accounts, per model, 29 whole days (no whole month)", True,
     {"group_by": "model", "start": "2026-11-02T00:00:00Z", "end": "2026-12-01T00:00:00Z"}),
    ("all accounts, per key, 29 whole days", True,
     {"group_by": "key", "start": "2026-11-02T00:00:00Z", "end": "2026-12-01T00:00:00Z"}),
    ("all accounts, per user, 29 whole days", True,
     {"group_by": "user", "start": "2026-11-02T00:00:00Z", "end": "2026-12-01T00:00:00Z"}),
    ("all accounts, per user, 30 days to an hour", True,
     {"group_by": "user", "start": "2026-10-31T14:00:00Z", "end": "2026-11-30T14:00:00Z"}),
    ("all accounts, per model, range not hour-aligned", True,
     {"group_by": "model", "start": "2026-11-01T00:17:00Z", "end": "2026-11-30T23:41:00Z"}),
]


def generate(rows: int, seed: int = 11) -> Iterator[list[tuple]]:
    """The month's rows in chunks, in time order, as tuples in FIELDS' order."""
    rng = random.Random(seed)
    prices = Prices.load()
    span = (MONTH[1] - MONTH[0]).total_seconds()
    account_weights = [1 / (i + 1) for i in range(len(ACCOUNTS))]
    model_weights = [1 / (i + 1) for i in range(len(MODELS))]
    user_weights = [1 / (i + 1) ** 0.8 for i in range(250)]
    made = 0
    while made < rows:
        n = min(CHUNK, rows - made)
        lo, hi = made / rows * span, (made + n) / rows * span
        offsets = sorted(rng.uniform(lo, hi) for _ in range(n))
        accounts = rng.choices(range(len(ACCOUNTS)), account_weights, k=n)
        models = rng.choices(MODELS, model_weights, k=n)
        users = rng.choices(range(250), user_weights, k=n)
        chunk = []
        for i in range(n):
            account = accounts[i]
            started = MONTH[0] + timedelta(seconds=offsets[i])
            prompt, completion = int(rng.expovariate(1 / 600)), int(rng.expovariate(1 / 150))
            cached = int(prompt * rng.random()) if rng.random() < 0.2 else None
            model, outcome = models[i], OUTCOMES[rng.randrange(len(OUTCOMES))]
            if outcome == "rejected":
                prompt = completion = 0
            cost = 0 if outcome == "rejected" else prices.cost_nanos(model, prompt, completion, cached, started)
            user = None if rng.random() < 0.3 else f"user-{account:02d}-{users[i]:03d}"
            chunk.append((f"cmpl-bench-{made + i:09d}", ACCOUNTS[account], f"key_{account:02d}{rng.randrange(3):014d}",
                          model.partition("/")[0], model, None, prompt, completion, prompt + completion, cached,
                          None, rng.random() < 0.02, outcome, rng.random() < 0.6, user, started,
                          started + timedelta(seconds=2), None, cost))
        made += n
        yield chunk


def load_sqlite(url: str, rows: int) -> None:
    path = make_url(url).database
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA synchronous=OFF")
    placeholders = ", ".join("?" * len(FIELDS))
    at = FIELDS.index("started_at"), FIELDS.index("ended_at")

    def text(moment: datetime) -> str:  # how UTCDateTime keeps it on SQLite
        return f"{moment:%Y-%m-%d %H:%M:%S}.{moment.microsecond:06d}"

    for chunk in generate(rows):
        connection.execute("BEGIN")
        connection.executemany(f"INSERT INTO ledger ({', '.join(FIELDS)}) VALUES ({placeholders})",
                               [(*r[:at[0]], text(r[at[0]]), text(r[at[1]]), *r[at[1] + 1:]) for r in chunk])
        connection.execute("COMMIT")
    connection.close()


async def load_postgresql(url: str, rows: int) -> None:
    connection = await asyncpg.connect(make_url(url).set(drivername="postgresql").render_as_string(False))
    try:
        for chunk in generate(rows):
            await connection.copy_records_to_table("ledger", records=chunk, columns=FIELDS)
    finally:
        await connection.close()


async def prepare_and_rebuild(url: str, rows: int, kind: str) -> dict[str, float]:
    engine = database.connect(url)
    timings = {}
    try:
        await database.prepare(engine, bootstrap)
        began = time.perf_counter()
        if kind == "sqlite":
            await asyncio.to_thread(load_sqlite, url, rows)
        else:
            await load_postgresql(url, rows)
        timings["load"] = time.perf_counter() - began
        began = time.perf_counter()
        async with database.writing(engine) as connection:
            await rollups.rebuild(connection)
        timings["rollups"] = time.perf_counter() - began
        async with engine.connect() as connection:
            await connection.exec_driver_sql("ANALYZE")
            await connection.commit()
    finally:
        await engine.dispose()
    return timings


async def rebuild_only(url: str) -> float:
    """The rollups of a database loaded by an earlier version of this bench, made anew."""
    engine = database.connect(url)
    try:
        began = time.perf_counter()
        async with database.writing(engine) as connection:
            await connection.run_sync(lambda c: metadata.create_all(c, tables=list(rollup_tables.values())))
            await rollups.rebuild(connection)
        async with engine.connect() as connection:
            # The rows the rebuild replaced are still on PostgreSQL's pages, and in its indexes,
            # until a VACUUM: a report would read them too, as no report of a live database does.
            if connection.dialect.name == "postgresql":
                await connection.execution_options(isolation_level="AUTOCOMMIT")
                await connection.exec_driver_sql("VACUUM ANALYZE")
            else:
                await connection.exec_driver_sql("ANALYZE")
                await connection.commit()
        return time.perf_counter() - began
    finally:
        await engine.dispose()


async def sizes(url: str) -> dict[str, int]:
    engine = database.connect(url)
    try:
        async with engine.connect() as connection:
            tables = [ledger, *(cube.table for cube in rollups.CUBES)]
            return {t.name: await connection.scalar(select(func.count()).select_from(t)) for t in tables}
    finally:
        await engine.dispose()


async def raw_group_by(url: str, accounts: list[str]) -> float:
    """The report as it was before rollups: one GROUP BY over the month's ledger rows."""
    engine = database.connect(url)
    c = ledger.c
    query = (select(c.account_id, c.model, *rollups.ledger_measures())
             .where(c.account_id.in_(accounts), c.started_at >= MONTH[0], c.started_at < MONTH[1])
             .group_by(c.account_id, c.model))
    try:
        async with engine.connect() as connection:
            began = time.perf_counter()
            await connection.execute(query)
            return time.perf_counter() - began
    finally:
        await engine.dispose()


def cpu_seconds(pid: int) -> float:
    """CPU time a process (all its threads) has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_reports(url: str, repeat: int) -> list[tuple[str, float, float, float, int]]:
    one, every = create_key(url, ACCOUNTS[0]), create_key(url, *ACCOUNTS)
    month = {"start": MONTH[0].isoformat().replace("+00:00", "Z"), "end": MONTH[1].isoformat().replace("+00:00", "Z")}
    env = {"GATEWAY_DATABASE_URL": url, "GATEWAY_VENDOR_LOCAL_ENABLED": "0"}
    samples: dict[str, list[float]] = {name: [] for name, _, _ in VARIANTS}
    cpu: dict[str, float] = {name: 0.0 for name, _, _ in VARIANTS}
    lines: dict[str, int] = {}
    with GatewayProcess(env) as gateway, httpx.Client(base_url=gateway.url, timeout=120) as client:
        for round_ in range(repeat + 2):  # the first two rounds warm caches and are not counted
            for name, all_accounts, params in VARIANTS:
                used, began = cpu_seconds(gateway.proc.pid), time.perf_counter()
                r = client.get("/v5/usage", params=month | params, headers={"x-api-key": every if all_accounts else one})
                elapsed, used = time.perf_counter() - began, cpu_seconds(gateway.proc.pid) - used
                r.raise_for_status()
                lines[name] = len(r.json()["data"])
                if round_ >= 2:
                    samples[name].append(elapsed)
                    cpu[name] += used
    return [(name, statistics.median(s) * 1000, sorted(s)[int(0.9 * (len(s) - 1))] * 1000, cpu[name] / len(s) * 1000,
             lines[name]) for name, s in samples.items()]


async def writer_cpu(url: str, rows: int = 20_000, rounds: int = 3) -> tuple[float, float]:
    """CPU microseconds per row the ledger's writer spends, with the rollups and without them, on
    live traffic: every row started moments ago (so a batch's rows share their hour and day)."""
    engine = database.connect(url)
    try:
        await database.prepare(engine, bootstrap)
        spent = {True: [], False: []}
        chunks = list(generate(rows * 2 * rounds, seed=5))
        now = datetime.now(UTC)
        unfilled = dict.fromkeys(set(COLUMNS) - set(FIELDS))
        # A third of the requests through chat (the ledger's endpoint is required since 0009).
        batch = [unfilled | dict(zip(FIELDS, r, strict=True)) | {"started_at": now, "ended_at": now,
                                                                  "endpoint": "chat" if i % 3 == 0 else "completions"}
                 for i, r in enumerate(r for chunk in chunks for r in chunk)]
        real_statements = rollups.statements  # what both writers (SQLite's, PostgreSQL's) run
        for round_ in range(rounds * 2):
            keep = round_ % 2 == 0
            rollups.statements = real_statements if keep else _none  # type: ignore[assignment]
            writer = Ledger(engine, max_pending=rows + 1)
            part = batch[round_ * rows:(round_ + 1) * rows]
            began = time.process_time()
            writer.start()
            for row in part:
                writer.add(row | {"request_id": f"w-{round_}-{row['request_id']}"})
            await writer.close()
            spent[keep].append((time.process_time() - began) / rows * 1e6)
        rollups.statements = real_statements  # type: ignore[assignment]
        return statistics.median(spent[True]), statistics.median(spent[False])
    finally:
        await engine.dispose()


def _none(rows, dialect) -> list:
    for _ in rows:  # the rows are still read, as the writer's would be
        pass
    return []


@contextlib.contextmanager
def a_database(kind: str, keep: Path | None) -> Iterator[str]:
    if keep is None:
        with empty_database(kind) as url:
            yield url
        return
    keep.mkdir(parents=True, exist_ok=True)
    if kind == "sqlite":
        yield f"sqlite:///{keep / 'usage-bench.db'}"
        return
    server = make_url(os.environ["GATEWAY_TEST_DATABASE_URL"])
    name = f"usage_bench_{secrets.token_hex(4)}"
    asyncio.run(_admin(server.set(drivername="postgresql").render_as_string(False), f'CREATE DATABASE "{name}"'))
    url = server.set(database=name).render_as_string(False)
    (keep / "postgresql.url").write_text(url + "\n")
    print(f"kept for --reuse: {url}", flush=True)
    yield url


async def _admin(server: str, sql: str) -> None:
    connection = await asyncpg.connect(server)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # so that the PostgreSQL database is dropped on the way out


def main() -> None:
    signal.signal(signal.SIGTERM, _interrupted)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--reuse", action="append", metavar="URL",
                        help="a database loaded by an earlier run (skips the load); once per database")
    parser.add_argument("--rebuild", action="store_true",
                        help="with --reuse: create the rollup tables it lacks and rebuild every rollup")
    parser.add_argument("--keep", type=Path, help="keep the databases loaded (SQLite in this folder, PostgreSQL"
                        " on its server, its URL in this folder) for --reuse")
    parser.add_argument("--reports-only", action="store_true", help="time the reports, not the ledger's writer")
    parser.add_argument("--writer-only", action="store_true", help="time the ledger's writer, not the reports")
    args = parser.parse_args()
    os.environ.setdefault("GATEWAY_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    kinds = args.backends.split(",")
    runs = [("reused", url) for url in args.reuse] if args.reuse else [(kind, None) for kind in kinds]
    if args.writer_only:
        runs = []
    for kind, reuse in runs:
        with contextlib.ExitStack() as stack:
            url = reuse or stack.enter_context(a_database(kind, args.keep))
            name = make_url(url).get_backend_name()
            print(f"\n## {name}: {args.rows:,} rows" if not reuse else f"\n## {name}: {url}", flush=True)
            if not reuse:
                timings = asyncio.run(prepare_and_rebuild(url, args.rows, name))
                print(f"bulk load {timings['load']:.0f} s, rollups built in {timings['rollups']:.0f} s", flush=True)
            elif args.rebuild:
                print(f"rollups rebuilt in {asyncio.run(rebuild_only(url)):.0f} s", flush=True)
            counted = asyncio.run(sizes(url))
            print("rows: " + ", ".join(f"{table} {count:,}" for table, count in counted.items()))
            raw = [asyncio.run(raw_group_by(url, ACCOUNTS)) for _ in range(2)]
            print(f"raw GROUP BY over the month's ledger rows (the report before rollups): {min(raw) * 1000:,.0f} ms")
            print("\n| GET /v5/usage, 2026-11 | median ms | p90 ms | gateway CPU ms | lines |\n"
                  "| --- | ---: | ---: | ---: | ---: |")
            for variant, median, p90, cpu, count in time_reports(url, args.repeat):
                print(f"| {variant} | {median:.1f} | {p90:.1f} | {cpu:.1f} | {count:,} |", flush=True)
    if args.reports_only:
        return
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        print("\n| ledger writer, CPU per row | with rollups | without | \n| --- | ---: | ---: |")
        for kind in args.backends.split(","):
            url = f"sqlite:///{folder}/writer.db" if kind == "sqlite" else stack.enter_context(empty_database(kind))
            with_rollups, without = asyncio.run(writer_cpu(url))
            print(f"| {kind} | {with_rollups:.0f} µs | {without:.0f} µs |", flush=True)


if __name__ == "__main__":
    main()
