"""Reports and rollups agree exactly, on SQLite and PostgreSQL: random ledger rows written by two
writers at once (two processes' ledgers, sharing the rollup rows), some rows sent twice (a batch
retried) and some refused (kept in ledger_rejects), then reports over random ranges, groupings and
filters compared with the same sums taken straight from the ledger's rows. The migration that
introduced the rollups fills them from the rows already there."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import event, insert, select, text

from gateway.store import database, prices, rollups, usage
from gateway.store.accounts import bootstrap
from gateway.store.ledger import Ledger
from gateway.store.meter import CACHE_HIT, OUTCOMES
from gateway.store.tables import ROLLUP_MEASURES, ledger, ledger_rejects
from tests.support.provision import empty_database

START = datetime(2026, 10, 26, 21, 0, tzinfo=UTC)  # over a month's end: every period of every rollup
SPAN = timedelta(days=40)
ACCOUNTS = ("acct-x", "acct-y", "acct-z")
MODELS = ("openai/gpt-3.5-turbo-instruct", "anthropic/claude-sonnet-4-6", "vllm/llama", "fake/odd\x00name")
KEYS = ("key_aaaaaaaaaaaaaaaa", "key_bbbbbbbbbbbbbbbb", "key_cccccccccccccccc")
USERS = (None, None, "alice", "bob", "", "ünï")


# The outcomes drawn at random; every 13th row is made a cache hit without a draw, so the rows
# drawn stay those the cases below were written for.
DRAWN = tuple(outcome for outcome in OUTCOMES if outcome != CACHE_HIT)


def random_row(rng: random.Random, n: int) -> dict:
    if rng.random() < 0.1:  # exactly on a period's start
        started = START + timedelta(hours=rng.randrange(int(SPAN.total_seconds() // 3600)))
    else:
        started = START + timedelta(microseconds=rng.randrange(int(SPAN.total_seconds() * 1e6)))
    prompt, completion = rng.randrange(0, 5000), rng.randrange(0, 800)
    row = {"request_id": f"cmpl-{n:06d}", "account_id": rng.choice(ACCOUNTS), "key_id": rng.choice(KEYS),
            "vendor": "v", "model": rng.choice(MODELS), "fallback_from": None, "prompt_tokens": prompt,
            "completion_tokens": completion, "total_tokens": prompt + completion,
            "cached_tokens": rng.choice([None, rng.randrange(0, prompt + 1)]),
            "reasoning_tokens": rng.choice([None, rng.randrange(0, completion + 1)]),
            "estimated": rng.random() < 0.2, "outcome": rng.choice(DRAWN), "streamed": rng.random() < 0.5,
            "end_user": rng.choice(USERS), "started_at": started, "ended_at": started, "ttft_ms": None,
            "endpoint": "chat" if n % 3 == 0 else "completions",
            "cost_nanos": rng.choice([None, rng.randrange(0, 10**7)])}
    if n % 13 == 0:
        row |= {"outcome": CACHE_HIT, "cost_nanos": 0, "saved_nanos": n * 1000}
    return row


async def write_concurrently(url: str, rows: list[dict], refused: list[dict]) -> None:
    """Two ledgers (as two gateway processes would have), each writing half of `rows`, then
    every row again (a retried batch) and rows the database refuses."""
    engines = [database.connect(url), database.connect(url)]
    try:
        await database.prepare(engines[0], bootstrap)
        ledgers = [Ledger(engine, max_pending=len(rows) + 10) for engine in engines]
        for ledger_ in ledgers:
            ledger_.start()
        for i, row in enumerate(rows):
            ledgers[i % 2].add(dict(row))
            if i % 97 == 0:
                await asyncio.sleep(0)  # let the writers commit while rows still come
        for i, row in enumerate(rows[::3]):
            ledgers[(i + 1) % 2].add(dict(row))  # the same request ids again: written once, counted once
        for row in refused:
            ledgers[0].add(dict(row))
        for ledger_ in ledgers:
            await ledger_.close()
    finally:
        for engine in engines:
            await engine.dispose()


@pytest.fixture(scope="module")
def random_ledger(backend_kind):
    rng = random.Random(20261201)
    rows = [random_row(rng, n) for n in range(2500)]
    refused = [random_row(rng, 90_000) | {"prompt_tokens": 2**63}]  # no BIGINT holds it
    if backend_kind == "postgresql":  # the database itself refuses it (SQLite does not check lengths)
        refused.append(random_row(rng, 90_001) | {"account_id": "a" * 65})
    with empty_database(backend_kind) as url:
        asyncio.run(write_concurrently(url, rows, refused))
        yield url, rows, refused


async def _read(url: str, work):
    engine = database.connect(url)
    try:
        async with engine.connect() as connection:
            return await work(connection)
    finally:
        await engine.dispose()


def expected(rows: list[dict], accounts, start, end, model, outcomes, group_by) -> list[tuple]:
    """What a report should say, summed in Python from the ledger's own rows."""
    fields = [usage.DIMENSIONS[d] for d in group_by]
    sums: dict[tuple, list[int]] = defaultdict(lambda: [0] * len(ROLLUP_MEASURES))
    for r in rows:
        if (accounts is not None and r["account_id"] not in accounts) or (start and r["started_at"] < start) \
                or (end and r["started_at"] >= end) or (model and r["model"] != model) \
                or (outcomes and r["outcome"] not in outcomes):
            continue
        values = {"model": r["model"], "day": r["started_at"].date().isoformat(), "key_id": r["key_id"],
                  "user": r["end_user"], "outcome": r["outcome"], "endpoint": r["endpoint"]}
        total = sums[(r["account_id"], *(values[f] for f in fields))]
        for i, value in enumerate(rollups.measures(r)):
            total[i] += value
    return sorted(((key, shown(dict(zip(ROLLUP_MEASURES, v, strict=True)))) for key, v in sums.items()), key=_order)


def shown(sums: dict[str, int]) -> tuple:
    """A line's sums (ROLLUP_MEASURES' order) as a report shows them: the nano-dollars in dollars,
    or None when none of the requests is priced."""
    unpriced = sums["requests"] and sums["unpriced_requests"] == sums["requests"]
    return tuple((None if unpriced else prices.usd(sums[m])) if m == "cost_nanos" else
                 prices.usd(sums[m]) if m == "saved_nanos" else sums[m] for m in ROLLUP_MEASURES)


SHOWN = {"cost_nanos": "cost_usd", "saved_nanos": "cache_saved_usd"}  # the sums a report shows in dollars


def as_tuples(lines: list[usage.UsageLine], group_by) -> list[tuple]:
    """The lines as `expected` gives them; each line has exactly the report's columns, in order."""
    assert all(list(line) == list(usage.columns(group_by)) for line in lines)
    fields = [usage.DIMENSIONS[d] for d in group_by]
    return sorted((((line["account_id"], *(line[f] for f in fields)),
                    tuple(line[SHOWN.get(m, m)] for m in ROLLUP_MEASURES)) for line in lines),
                  key=_order)


def _order(item: tuple) -> list:
    return [(value is not None, value) for value in item[0]]


def random_instant(rng: random.Random) -> datetime | None:
    choice = rng.random()
    if choice < 0.15:
        return None
    base = START - timedelta(hours=2) + timedelta(hours=rng.randrange(int(SPAN.total_seconds() // 3600) + 4))
    if choice < 0.45:
        return base  # on an hour
    if choice < 0.55:
        return base.replace(hour=0)  # on a day
    if choice < 0.62:
        return base.replace(day=1, hour=0)  # on a month
    return base + timedelta(microseconds=rng.randrange(3600 * 10**6))


def test_the_writers_rollups_are_exactly_the_ledgers_rows_summed(random_ledger):
    url, rows, refused = random_ledger

    async def compare(connection):
        stored = [dict(r._mapping) for r in await connection.execute(select(ledger))]
        rejected = [r.request_id for r in await connection.execute(select(ledger_rejects))]
        before = {cube.table.name: sorted(map(tuple, await connection.execute(select(cube.table))))
                  for cube in rollups.CUBES}
        await connection.rollback()  # end the reads' transaction: the rebuild runs in its own
        async with connection.begin():
            await rollups.rebuild(connection)
            after = {cube.table.name: sorted(map(tuple, await connection.execute(select(cube.table))))
                     for cube in rollups.CUBES}
        return stored, rejected, before, after

    stored, rejected, before, after = asyncio.run(_read(url, compare))
    assert len(stored) == len(rows) and sorted(rejected) == sorted(r["request_id"] for r in refused)
    assert all(before.values()) and before == after


def test_reports_over_random_ranges_groupings_and_filters_equal_the_ledgers_sums(random_ledger):
    url, rows, _ = random_ledger
    rng = random.Random(7)
    stored = [r | {"model": r["model"].replace("\x00", "\ufffd")} for r in rows]  # as the ledger keeps it
    cases = []
    for _ in range(60):
        start, end = random_instant(rng), random_instant(rng)
        dims = list(usage.DIMENSIONS)
        group_by = tuple(rng.sample(dims, rng.randrange(1, len(dims) + 1)))
        accounts = rng.choice([None, ACCOUNTS[:1], ACCOUNTS[1:]])
        model = rng.choice([None, None, rng.choice(MODELS)])
        outcomes = rng.choice([None, None, tuple(rng.sample(OUTCOMES, 2))])
        cases.append((accounts, start, end, model, outcomes, group_by))

    async def reports(connection):
        return [await usage.report(connection, accounts=a, start=s, end=e, model=m, outcomes=o, group_by=g)
                for a, s, e, m, o, g in cases]

    found = asyncio.run(_read(url, reports))
    nonempty = 0
    for (accounts, start, end, model, outcomes, group_by), lines in zip(cases, found, strict=True):
        want = expected(stored, accounts, start, end, model and model.replace("\x00", "\ufffd"), outcomes, group_by)
        assert as_tuples(lines, group_by) == want, (accounts, start, end, model, outcomes, group_by)
        nonempty += bool(want)
        # Lines come ordered by account, then by the grouped values in the order asked (null first).
        keyed = usage.columns(group_by)[:1 + len(group_by)]  # the account and each grouped field
        order = [[(line[f] is not None, line[f]) for f in keyed] for line in lines]
        assert order == sorted(order)
    assert nonempty >= len(cases) // 2  # the cases are not vacuous


def test_a_report_of_one_whole_period_by_exactly_a_rollups_dimensions_equals_the_ledgers_sums(random_ledger):
    """Such a report reads that rollup's rows as its lines, with no GROUP BY: every rollup, with and
    without the filters its dimensions allow."""
    url, rows, _ = random_ledger
    stored = [r | {"model": r["model"].replace("\x00", "\ufffd")} for r in rows]
    named = {column: dimension for dimension, column in usage.DIMENSIONS.items()}
    periods = {"month": (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)),
               "day": (datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)),
               "hour": (datetime(2026, 11, 30, 23, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))}
    cases = []
    for cube in rollups.CUBES:
        group_by = tuple(named[d] for d in sorted(cube.kept))
        start, end = periods[cube.grain]
        assert usage.segments(start, end, rollups.chain(cube.kept)) == [(cube, start, end, 1)]  # that rollup, alone
        cases.append((None, start, end, None, None, group_by))
        cases.append((ACCOUNTS[1:], start, end, MODELS[3] if "model" in cube.kept else None,
                      OUTCOMES[:3] if "outcome" in cube.kept else None, group_by))

    async def reports(connection):
        return [await usage.report(connection, accounts=a, start=s, end=e, model=m, outcomes=o, group_by=g)
                for a, s, e, m, o, g in cases]

    found = asyncio.run(_read(url, reports))
    for (accounts, start, end, model, outcomes, group_by), lines in zip(cases, found, strict=True):
        want = expected(stored, accounts, start, end, model and model.replace("\x00", "\ufffd"), outcomes, group_by)
        assert want and as_tuples(lines, group_by) == want, (accounts, start, end, model, outcomes, group_by)
        keyed = usage.columns(group_by)[:1 + len(group_by)]  # the account and each grouped field
        order = [[(line[f] is not None, line[f]) for f in keyed] for line in lines]
        assert order == sorted(order)


def test_reports_of_most_of_a_period_read_as_the_period_less_the_rest_equal_the_ledgers_sums(random_ledger):
    """Ranges a little inside months, days and hours (and a little over them), where reports take
    the rest of the period away: every line as the ledger's rows sum it, and no line of nothing."""
    url, rows, _ = random_ledger
    stored = [r | {"model": r["model"].replace("\x00", "\ufffd")} for r in rows]
    rng = random.Random(11)
    cases = []
    for _ in range(40):
        grain = rng.choice(rollups.GRAINS)
        period = rollups.floor(START + rng.random() * SPAN, grain)
        bound = rollups.after(period, grain)
        length = bound - period
        start = period + rng.choice([timedelta(0), timedelta(hours=rng.randrange(0, 30)), rng.random() * length / 8])
        end = bound - rng.choice([timedelta(0), timedelta(hours=rng.randrange(0, 30)), rng.random() * length / 8])
        if rng.random() < 0.3:
            end += rng.choice([timedelta(days=1), timedelta(hours=5), length])  # into the next period
        group_by = tuple(rng.sample(list(usage.DIMENSIONS), rng.randrange(1, 4)))
        cases.append((rng.choice([None, ACCOUNTS[1:]]), start, end, rng.choice([None, MODELS[0]]),
                      rng.choice([None, OUTCOMES[:2]]), group_by))

    async def reports(connection):
        return [await usage.report(connection, accounts=a, start=s, end=e, model=m, outcomes=o, group_by=g)
                for a, s, e, m, o, g in cases]

    taken_away = 0
    for (accounts, start, end, model, outcomes, group_by), lines in zip(cases, asyncio.run(_read(url, reports)),
                                                                        strict=True):
        want = expected(stored, accounts, start, end, model, outcomes, group_by)
        assert as_tuples(lines, group_by) == want, (accounts, start, end, model, outcomes, group_by)
        needed = {usage.DIMENSIONS[d] for d in group_by if d != "day"} | ({"model"} if model else set()) \
            | ({"outcome"} if outcomes else set())
        taken_away += any(sign < 0 for *_, sign in usage.segments(start, end, rollups.chain(needed, "day" in group_by)))
    assert taken_away >= len(cases) // 4  # the cases are what they are meant to be


def test_a_report_reads_whole_months_days_and_hours_from_the_rollups_and_only_partial_hours_from_the_ledger():
    cubes = rollups.chain({"model", "key_id"})
    start, end = datetime(2026, 10, 30, 22, 15, tzinfo=UTC), datetime(2026, 12, 2, 1, 30, tzinfo=UTC)
    pieces = [(cube and cube.table.name, lo, hi, sign) for cube, lo, hi, sign in usage.segments(start, end, cubes)]
    at = lambda m, d, h, minute=0: datetime(2026, m, d, h, minute, tzinfo=UTC)  # noqa: E731
    assert pieces == [(None, start, at(10, 30, 23), 1), ("usage_hourly", at(10, 30, 23), at(10, 31, 0), 1),
                      ("usage_daily", at(10, 31, 0), at(11, 1, 0), 1), ("usage_monthly", at(11, 1, 0), at(12, 1, 0), 1),
                      ("usage_daily", at(12, 1, 0), at(12, 2, 0), 1), ("usage_hourly", at(12, 2, 0), at(12, 2, 1), 1),
                      (None, at(12, 2, 1), end, 1)]
    assert usage.segments(None, None, cubes) == [(cubes[0], None, None, 1)]
    # Most of a period is the period less the rest: 29 days of a month, a month but for minutes.
    named = lambda pieces: [(cube and cube.table.name, lo, hi, sign) for cube, lo, hi, sign in pieces]  # noqa: E731
    assert named(usage.segments(at(11, 2, 0), at(12, 1, 0), rollups.chain({"user"}))) == [
        ("usage_daily_users", at(11, 1, 0), at(11, 2, 0), -1),
        ("usage_monthly_user_totals", at(11, 1, 0), at(12, 1, 0), 1)]
    assert named(usage.segments(at(11, 1, 0, 17), at(11, 30, 23, 41), rollups.chain({"model"}))) == [
        ("usage_monthly", at(11, 1, 0), at(12, 1, 0), 1), (None, at(11, 1, 0), at(11, 1, 0, 17), -1),
        (None, at(11, 30, 23, 41), at(12, 1, 0), -1)]
    assert named(usage.segments(at(11, 1, 20), at(11, 3, 0), rollups.chain({"model"}))) == [
        ("usage_hourly_models", at(11, 1, 20), at(11, 2, 0), 1), ("usage_daily_models", at(11, 2, 0), at(11, 3, 0), 1)]
    # Per period, the smallest rollup that has what a report needs; no months for a report per day.
    assert [c.table.name for c in rollups.chain({"model"}, by_day=True)] == ["usage_daily_models",
                                                                             "usage_hourly_models"]
    assert [c.table.name for c in rollups.chain({"user"})] == ["usage_monthly_user_totals", "usage_daily_users",
                                                               "usage_hourly_users"]
    assert [c.table.name for c in rollups.chain({"user", "outcome"})] == ["usage_monthly_users", "usage_daily_users",
                                                                          "usage_hourly_users"]
    assert [c.table.name for c in rollups.chain({"user", "model"})] == ["usage_hourly_users"]
    assert [c.table.name for c in rollups.chain({"outcome"})] == ["usage_monthly", "usage_daily", "usage_hourly"]
    assert [c.table.name for c in rollups.chain({"key_id"}, by_day=True)] == ["usage_daily_keys", "usage_hourly"]
    assert [c.table.name for c in rollups.chain({"endpoint", "model", "outcome"})] == [
        "usage_monthly_endpoints", "usage_daily_endpoints", "usage_hourly_endpoints"]
    # No rollup keeps the endpoint with the key or the user: such a report reads the ledger.
    assert rollups.chain({"endpoint", "user"}) == rollups.chain({"endpoint", "key_id"}) == []
    year_end = datetime(2026, 12, 31, 12, tzinfo=UTC)
    assert rollups.ceil(year_end, "month") == datetime(2027, 1, 1, tzinfo=UTC)
    assert usage.segments(end, start, cubes) == []
    cubes = rollups.chain(set())
    far = datetime.max.replace(tzinfo=UTC)  # no period starts after it: the ledger, not an overflow
    assert usage.segments(far - timedelta(minutes=1), far, cubes) == [(None, far - timedelta(minutes=1), far, 1)]


def test_the_migration_fills_the_rollups_from_the_rows_already_there_and_leaves_them_unpriced(backend_kind):
    rng = random.Random(3)
    rows = [random_row(rng, n) for n in range(300)]
    for row in rows:
        del row["cost_nanos"]  # the ledger before 0004 had no cost
        del row["endpoint"]  # nor, before 0009, an endpoint
        if row.pop("saved_nanos", None) is not None:  # nor a response cache
            row["outcome"] = "completed"
        row["model"] = row["model"].replace("\x00", "\ufffd")  # as the writer keeps it

    async def migrate(url: str):
        engine = database.connect(url)
        try:
            async with database.writing(engine) as connection:
                await connection.run_sync(_upgrade_to("0003"))
                await connection.execute(insert(ledger.c.request_id.table).values(rows))
            await database.prepare(engine, bootstrap)
            async with engine.connect() as connection:
                costs = {r.cost_nanos for r in await connection.execute(select(ledger.c.cost_nanos))}
                filled = {cube.table.name: sorted(map(tuple, await connection.execute(select(cube.table))))
                          for cube in rollups.CUBES}
                lines = await usage.report(connection, accounts=None, group_by=("user", "day"))
                await connection.rollback()
                async with connection.begin():
                    await rollups.rebuild(connection)
                    rebuilt = {cube.table.name: sorted(map(tuple, await connection.execute(select(cube.table))))
                               for cube in rollups.CUBES}
            return costs, filled, rebuilt, lines
        finally:
            await engine.dispose()

    with empty_database(backend_kind) as url:
        costs, filled, rebuilt, lines = asyncio.run(migrate(url))
    assert costs == {None}
    assert filled == rebuilt and all(filled.values())
    assert sum(line["requests"] + line["refused_requests"] for line in lines) == 300
    # Every row that reached a vendor is unpriced; refused ones cost nothing either way.
    assert all(line["unpriced_requests"] == line["requests"] for line in lines)
    assert all(line["cost_usd"] is None for line in lines if line["requests"])


def test_the_endpoint_rollups_migration_fills_them_as_the_writer_would(backend_kind):
    """0013 sums the rows already in the ledger (both endpoints, costs, coalesced refusals, cache
    hits) into the rollups per endpoint exactly as `rebuild` does from the same rows."""
    rng = random.Random(13)
    rows = [random_row(rng, n) for n in range(400)]
    for row in rows:
        row["model"] = row["model"].replace("\x00", "\ufffd")  # as the writer keeps it
        # Refusals alike that waited for the writer together share a row (one insert: every row has every key).
        row["refusals"] = rng.randrange(1, 5) if row["outcome"] == "refused" else None
        row.setdefault("saved_nanos", None)
    endpoints = [cube for cube in rollups.CUBES if "endpoint" in cube.kept]

    async def migrate(url: str):
        engine = database.connect(url)
        try:
            async with database.writing(engine) as connection:
                await connection.run_sync(_upgrade_to("0012"))
                await connection.execute(insert(ledger).values(rows))
            await database.prepare(engine, bootstrap)
            async with engine.connect() as connection:
                filled = {cube.table.name: sorted(map(tuple, await connection.execute(select(cube.table))))
                          for cube in endpoints}
                await connection.rollback()
                async with connection.begin():
                    await rollups.rebuild(connection)
                    rebuilt = {cube.table.name: sorted(map(tuple, await connection.execute(select(cube.table))))
                               for cube in endpoints}
                lines = await usage.report(connection, accounts=None, group_by=("endpoint",))
            return filled, rebuilt, lines
        finally:
            await engine.dispose()

    with empty_database(backend_kind) as url:
        filled, rebuilt, lines = asyncio.run(migrate(url))
    assert len(endpoints) == 3 and filled == rebuilt and all(filled.values())
    assert as_tuples(lines, ("endpoint",)) == expected(rows, None, None, None, None, None, ("endpoint",))
    assert {line["endpoint"] for line in lines} == {"chat", "completions"}


def _upgrade_to(revision: str):
    def run(connection):
        config = Config()
        config.set_main_option("script_location", "gateway.store:migrations")
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    return run


def test_a_report_is_one_statement_its_lines_in_code_point_order_whatever_the_databases_collation(backend_kind):
    """The lines come from the database sorted, in the order Python sorts them (text by code point),
    also where the database's own order differs: here PostgreSQL's text columns take a language's
    collation, which puts "a" before "B" and "ä" before "b"."""
    rng = random.Random(5)
    names = ("B", "a", "ä", "Z", "b", "_", "ü1")
    rows = [random_row(rng, n) | {"account_id": f"acct-{rng.choice(names)}", "model": f"m-{rng.choice(names)}",
                                  "end_user": rng.choice((None, *names))} for n in range(400)]

    async def collate(url: str) -> None:
        engine = database.connect(url)
        try:
            await database.prepare(engine, bootstrap)
            async with database.writing(engine) as connection:
                if not await connection.scalar(text("SELECT count(*) FROM pg_collation WHERE collname = 'en-x-icu'")):
                    pytest.skip("this PostgreSQL has no ICU collations")
                for table in (ledger, *(cube.table for cube in rollups.CUBES)):
                    for column in table.c:
                        if column.name in ("account_id", "model", "end_user"):
                            kind = column.type.compile(dialect=connection.dialect)
                            await connection.execute(text(f'ALTER TABLE {table.name} ALTER COLUMN {column.name} '
                                                          f'TYPE {kind} COLLATE "en-x-icu"'))
        finally:
            await engine.dispose()

    month = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    inside = (datetime(2026, 10, 30, 22, 15, tzinfo=UTC), datetime(2026, 11, 20, 3, 5, tzinfo=UTC))
    ranges = [month, (None, None), inside]
    groupings = (("user",), ("model", "user"), ("user", "day"))
    cases = [(start, end, group_by) for start, end in ranges for group_by in groupings]
    statements = []

    async def reports(connection):
        event.listen(connection.sync_engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
        return [await usage.report(connection, accounts=None, start=s, end=e, group_by=g) for s, e, g in cases]

    with empty_database(backend_kind) as url:
        if backend_kind == "postgresql":
            asyncio.run(collate(url))
        asyncio.run(write_concurrently(url, rows, []))
        found = asyncio.run(_read(url, reports))
    # Each report one statement, however many periods it reads.
    assert [s.split()[0] for s in statements if s != "BEGIN"] == ["SELECT"] * len(cases)
    for (start, end, group_by), lines in zip(cases, found, strict=True):
        assert as_tuples(lines, group_by) == expected(rows, None, start, end, None, None, group_by)
        keyed = usage.columns(group_by)[:1 + len(group_by)]
        order = [[(line[f] is not None, line[f]) for f in keyed] for line in lines]
        assert len(lines) > 20 and order == sorted(order), (start, end, group_by)
