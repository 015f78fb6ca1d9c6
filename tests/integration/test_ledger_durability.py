"""What the ledger keeps when things go wrong: a hard kill under load (only the newest rows can be
lost; the test prints the loss window it saw) and a database outage (rows wait in memory, bounded, and readiness says so).

    GATEWAY_TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python -m pytest -s tests/integration/test_ledger_durability.py      # prints the measurements
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
import threading
import time

import httpx
import pytest

from tests.support.cli import fresh_account
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import wait_until
from tests.support.provision import (
    create_key,
    empty_database,
    ledger_rows,
    postgres_down,
    postgres_unavailable,
    provision,
    wait_for_rows,
)

LOAD_REQUESTS = 300  # answered before the kill, so that the measurement means something
CONCURRENCY = 16


def test_a_hard_kill_loses_only_rows_answered_in_the_last_moments(upstream, backend):
    """A row is queued before its answer is sent, and the writer commits rows in the order they were
    queued, as soon as it can. So if a row was written, every row answered before that row's request
    was sent was written too: a kill can only lose the newest rows, those of the commit in flight.
    The test kills the gateway once rows are being written, and checks that order with a counter of the client's events (no wall-clock bound, which
    would only measure how loaded the machine is); the loss window in time is printed."""
    account = fresh_account()
    key = create_key(backend.url, account)
    events = itertools.count()  # the client's events in order (one event loop, so a total order)
    answered: list[tuple[str, int, int, float]] = []  # (request id, sent, answered, client clock)
    stop = threading.Event()

    async def load(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, headers={"x-api-key": key}, timeout=10, verify=SHARED_TLS) as client:
            async def worker() -> None:
                while not stop.is_set():
                    sent = next(events)
                    try:
                        r = await client.post("/v5/completions", json={"model": "fake/m", "prompt": "x",
                                                                       "max_tokens": 2})
                    except httpx.HTTPError:
                        return  # the gateway is gone
                    if r.status_code == 200 and not stop.is_set():
                        answered.append((r.headers["x-request-id"], sent, next(events), time.monotonic()))

            await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))

    with GatewayProcess(gateway_env(upstream.url, backend.url)) as gateway:
        clients = threading.Thread(target=asyncio.run, args=(load(gateway.url),))
        started = time.monotonic()
        clients.start()
        # The kill comes while the load runs, once the writer has committed rows during it (a
        # writer that waits for a timer or for shutdown never gets there).
        committed = wait_for_rows(backend.url, account, LOAD_REQUESTS)
        assert len(committed) >= LOAD_REQUESTS, f"only {len(committed)} rows written while the load ran"
        os.kill(gateway.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        stop.set()  # answers read after this may have come after the kill: not counted
        clients.join(30)
        gateway.proc.wait(10)

    written = {row["request_id"] for row in ledger_rows(backend.url, account)}
    before_kill = [a for a in answered if a[3] <= killed_at]
    kept = [a for a in before_kill if a[0] in written]
    lost = [a for a in before_kill if a[0] not in written]
    seconds = killed_at - started
    window = max((killed_at - a[3] for a in lost), default=0.0)
    print(f"\n[{backend.url.split(':')[0]}] hard kill after {seconds:.1f}s at concurrency {CONCURRENCY}: "
          f"{len(before_kill)} answered ({len(before_kill) / seconds:.0f}/s), {len(lost)} rows lost, "
          f"the oldest lost answer {window * 1000:.1f} ms before the kill")
    assert len(before_kill) >= LOAD_REQUESTS
    newest_kept_sent = max(sent for _, sent, _, _ in kept)
    older = [rid for rid, _, at, _ in lost if at < newest_kept_sent]
    assert not older, (f"{len(older)} rows lost although a row requested after their answer was written: "
                       f"the writer does not commit in order")


@pytest.fixture
def postgres():
    """An outage is simulated on PostgreSQL, the database that lives apart from the gateway."""
    if reason := postgres_unavailable():
        pytest.skip(reason)
    with empty_database("postgresql") as url:
        yield provision(url)


def test_a_database_outage_does_not_fail_completions_and_is_reported(upstream, postgres):
    account = fresh_account()
    key = create_key(postgres.url, account)
    unseen_key = create_key(postgres.url, account)  # never used before the outage: nothing cached
    # A key cache of 0 s: a key's cached answer is stale at once, and is kept while the database is away.
    env = gateway_env(upstream.url, postgres.url, GATEWAY_LEDGER_BUFFER_ROWS="5", GATEWAY_KEY_CACHE_SECONDS="0")
    body = {"model": "fake/m", "prompt": "x", "max_tokens": 2}
    with GatewayProcess(env) as gateway:
        url = gateway.url

        def complete(api_key: str) -> httpx.Response:
            return httpx.post(f"{url}/v5/completions", headers={"x-api-key": api_key}, json=body, timeout=10,
                              verify=SHARED_TLS)

        assert complete(key).status_code == 200
        wait_for_rows(postgres.url, account, 1)
        with postgres_down(postgres.url):
            answers = [complete(key) for _ in range(8)]
            assert [a.status_code for a in answers] == [200] * 8
            ids = [a.headers["x-request-id"] for a in answers]
            ready = httpx.get(f"{url}/readyz", headers={"x-api-key": key}, verify=SHARED_TLS).json()
            assert ready["status"] == "degraded" and ready["checks"]["fake"] == "ok"
            assert re.search(r"database unavailable for \d+s .*; 5 ledger rows waiting", ready["checks"]["database"])
            refused = complete(unseen_key)
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "database_unavailable"
            report = httpx.get(f"{url}/v5/usage", headers={"x-api-key": key}, verify=SHARED_TLS)
            assert report.status_code == 503 and report.headers["x-should-retry"] == "true"
        rows = wait_for_rows(postgres.url, account, 6)
        def recovered() -> dict | None:
            ready = httpx.get(f"{url}/readyz", headers={"x-api-key": key}, verify=SHARED_TLS).json()
            return ready if ready["status"] == "ok" else None

        assert wait_until(recovered, message="readiness to recover")["checks"]["database"] == "ok"
        assert complete(unseen_key).status_code == 200
        log = gateway.log()
    written = {row["request_id"] for row in rows}
    assert set(ids[:5]) <= written  # the buffer's five
    for dropped in ids[5:]:  # the rest: logged in full, so that they can be replayed
        assert dropped not in written
        assert re.search(rf"ledger row NOT written \(5 rows already wait .*\"request_id\": \"{dropped}\"", log)
    assert "ledger: cannot write to the database" in log and "ledger: database is back" in log
