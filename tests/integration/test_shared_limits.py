"""Limits shared by several gateway processes: exact across workers and hosts through one Redis
(the machine's, under a key prefix of the test's own), what happens when Redis goes away under
each policy (a Redis of the test's own, stopped mid-run), and several workers without Redis,
which must never count per process. The limits' clock is a file the test holds still."""

from __future__ import annotations

import asyncio
import os
import signal

import aiohttp
import httpx
import pytest

from tests.support.clocks import FileClock
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import wait_until, workers_of
from tests.support.provision import (
    empty_database,
    new_key,
    postgres_unavailable,
    provision,
    requests_in,
    run_cli,
    wait_for_rows,
)
from tests.support.redis_servers import RedisServer, redis_prefix, redis_url, remove_redis_keys

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def clock(tmp_path_factory):
    return FileClock(str(tmp_path_factory.mktemp("clock") / "now"))


def env_of(upstream, url: str, clock: FileClock, **extra: str) -> dict[str, str]:
    return gateway_env(upstream.url, url, GATEWAY_LIMITS_CACHE_SECONDS="0.05", GATEWAY_VALIDATE_RESPONSES="0",
                       **clock.env, **extra)


def complete(url: str, key: str, **body) -> httpx.Response:
    body = {"model": "fake/m", "prompt": "x", "max_tokens": 2} | body
    return httpx.post(f"{url}/v5/completions", headers={"x-api-key": key}, json=body, timeout=30, verify=SHARED_TLS)


def ready(url: str, key: str) -> dict:
    return httpx.get(f"{url}/readyz", headers={"x-api-key": key}, verify=SHARED_TLS).json()


async def burst(urls: list[str], key: str, count: int) -> list[tuple[int, dict[str, str]]]:
    """`count` requests at once, spread over `urls` in turn, each on a connection of its own."""
    async def one(i: int) -> tuple[int, dict[str, str]]:
        async with aiohttp.ClientSession() as session, session.post(
                f"{urls[i % len(urls)]}/v5/completions", headers={"x-api-key": key},
                json={"model": "fake/m", "prompt": f"burst {i}", "max_tokens": 2}) as r:
            await r.read()
            return r.status, dict(r.headers)

    return await asyncio.gather(*(one(i) for i in range(count)))


def test_two_gateways_of_two_workers_share_one_rpm_limit_exactly(upstream, clock):
    if reason := postgres_unavailable():
        pytest.skip(reason)
    prefix = redis_prefix()
    with empty_database("postgresql") as url:
        provision(url)
        key, key_id, account = new_key(url)
        run_cli(url, "limits", "set", "--key", key_id, "--rpm", "10")  # before the start: both load it
        env = env_of(upstream, url, clock, GATEWAY_WORKERS="2", GATEWAY_REDIS_URL=redis_url(),
                     GATEWAY_REDIS_PREFIX=prefix)
        try:
            with GatewayProcess(env, module="tests.support.clocked_gateway") as one, \
                    GatewayProcess(env, module="tests.support.clocked_gateway") as two:
                answers = asyncio.run(burst([one.url, two.url], key, 30))
        finally:
            remove_redis_keys(prefix)
        statuses = [status for status, _ in answers]
        assert statuses.count(200) == 10 and statuses.count(429) == 20
        for status, headers in answers:
            assert headers["x-ratelimit-limit-requests"] == "10"
            if status == 429:
                assert headers["x-should-retry"] == "true" and int(headers["Retry-After"]) >= 1
                assert headers["x-ratelimit-remaining-requests"] == "0"
                assert headers["x-ratelimit-reset-requests"].endswith("s")
        rows = wait_for_rows(url, account, 30)
        assert requests_in(rows, "refused") == 20 and requests_in(rows, "completed") == 10  # (rows alike shared)


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_redis_going_away_mid_run_follows_the_policy(upstream, clock, policy, tmp_path):
    with empty_database("sqlite") as url, RedisServer() as store:
        db = provision(url)
        key, key_id, account = new_key(url)
        run_cli(url, "limits", "set", "--key", key_id, "--rpm", "2")
        env = env_of(upstream, url, clock, GATEWAY_REDIS_URL=store.url, GATEWAY_LIMITS_ON_STORE_FAILURE=policy)
        with GatewayProcess(env, module="tests.support.clocked_gateway") as gateway:
            assert [complete(gateway.url, key).status_code for _ in range(3)] == [200, 200, 429]
            store.stop()
            during = complete(gateway.url, key)
            if policy == "open":
                assert during.status_code == 200 and "x-ratelimit-limit-requests" not in during.headers
            else:
                assert during.status_code == 503 and during.headers["retry-after"] == "1"
                assert during.json()["error"]["code"] == "limits_store_unavailable"
            unlimited = complete(gateway.url, db.key)  # a key without limits never waits for Redis
            assert unlimited.status_code == 200
            health = ready(gateway.url, key)
            assert health["status"] == "degraded" and "limits store unavailable" in health["checks"]["limits"]
            assert "limits store unavailable" in gateway.log()
            store.start()  # empty again: it kept nothing
            wait_until(lambda: ready(gateway.url, key)["status"] == "ok", message="readiness once Redis is back")
            after = [complete(gateway.url, key) for _ in range(3)]
            assert [r.status_code for r in after] == [200, 200, 429], [dict(r.headers) for r in after]
        assert requests_in(wait_for_rows(url, account, 7), "refused") == (2 if policy == "open" else 3)


def budget_used(store: RedisServer, prefix: str, key_id: str) -> int | None:
    """What Redis counts as used of the key's token budget (None: no counter yet)."""
    import redis

    client = redis.Redis.from_url(store.url)
    try:
        counters = list(client.scan_iter(match=f"{prefix}key:{key_id}:budget:tokens:*"))
        used = client.hget(counters[0], "used") if counters else None
        return None if used is None else int(used)
    finally:
        client.close()


def test_a_redis_restarted_empty_counts_each_request_once(upstream, clock):
    """Redis killed and started again empty while a budgeted key is used (policy `open`: served
    uncounted meanwhile): the counter is seeded from the ledger and the outage's settlements are
    replayed on top, and each request counts once (before: +42%, the outage counted twice)."""
    prefix = redis_prefix()
    with empty_database("sqlite") as url, RedisServer() as store:
        provision(url)
        key, key_id, account = new_key(url)
        run_cli(url, "limits", "set", "--key", key_id, "--budget-tokens", "1000000", "--period", "day")
        env = env_of(upstream, url, clock, GATEWAY_REDIS_URL=store.url, GATEWAY_REDIS_PREFIX=prefix)
        with GatewayProcess(env, module="tests.support.clocked_gateway") as gateway:
            def ledger_total(count: int) -> int:
                rows = wait_for_rows(url, account, count)
                assert len(rows) == count and {row["outcome"] for row in rows} == {"completed"}
                return sum(row["total_tokens"] for row in rows)

            for i in range(4):
                assert complete(gateway.url, key, prompt=f"before {i}").status_code == 200
            wait_until(lambda: budget_used(store, prefix, key_id) == ledger_total(4), message="counted before")
            store.stop()
            for i in range(4):
                assert complete(gateway.url, key, prompt=f"during {i} " * (i + 1)).status_code == 200
            store.start()  # empty: it kept nothing
            wait_until(lambda: ready(gateway.url, key)["status"] == "ok", message="readiness once Redis is back")
            for i in range(4):
                assert complete(gateway.url, key, prompt=f"after {i}").status_code == 200
            total = ledger_total(12)
            wait_until(lambda: budget_used(store, prefix, key_id) == total, timeout=15,
                       message=f"Redis to count the ledger's {total} tokens")
            assert complete(gateway.url, key, prompt="last").status_code == 200
            total = ledger_total(13)
            wait_until(lambda: budget_used(store, prefix, key_id) == total, timeout=15,
                       message=f"Redis to count the ledger's {total} tokens")
            assert "settlements waiting" not in str(ready(gateway.url, key))


def test_a_revoked_keys_limits_do_not_stop_several_workers_starting(upstream, clock):
    """No request can use a revoked key, so its limits need no counter: several workers without
    Redis start beside them (they refused to start while any key's limits remained)."""
    with empty_database("sqlite") as url:
        db = provision(url)
        _, key_id, _ = new_key(url)
        run_cli(url, "limits", "set", "--key", key_id, "--rpm", "5")
        run_cli(url, "keys", "revoke", key_id)
        env = env_of(upstream, url, clock, GATEWAY_WORKERS="2")
        with GatewayProcess(env, module="tests.support.clocked_gateway") as gateway:
            assert complete(gateway.url, db.key).status_code == 200
            assert ready(gateway.url, db.key)["checks"]["limits"] == "ok"


def test_several_workers_without_redis_never_count_per_process(upstream, clock):
    with empty_database("sqlite") as url:
        db = provision(url)
        key, key_id, _ = new_key(url)
        run_cli(url, "limits", "set", "--key", key_id, "--rpm", "5")
        env = env_of(upstream, url, clock, GATEWAY_WORKERS="2")
        refused = GatewayProcess(env, module="tests.support.clocked_gateway", ready_timeout=30)
        with pytest.raises(RuntimeError) as failed:
            refused.start()
        assert "2 workers without GATEWAY_REDIS_URL cannot count limits exactly" in str(failed.value)
        assert f"limits exist for key {key_id}" in str(failed.value)

        run_cli(url, "limits", "clear", "--key", key_id, "--all")
        other, other_id, _ = new_key(url)
        run_cli(url, "limits", "set", "--key", other_id, "--models", "fake/a")  # needs no counter
        with GatewayProcess(env, module="tests.support.clocked_gateway") as gateway:
            assert complete(gateway.url, key).status_code == 200
            assert complete(gateway.url, other, model="fake/b").status_code == 403
            run_cli(url, "limits", "set", "--key", key_id, "--rpm", "5")  # set while it runs

            def unenforceable() -> httpx.Response | None:
                answer = complete(gateway.url, key)
                return answer if answer.status_code == 503 else None

            error = wait_until(unenforceable, message="the new limit to be refused").json()["error"]
            assert error["code"] == "limits_unenforceable" and "GATEWAY_REDIS_URL" in error["message"]

            def both_degraded() -> bool:  # each read on a connection of its own: either worker answers
                answers = [ready(gateway.url, db.key) for _ in range(8)]
                return all(a["status"] == "degraded" and "cannot count limits exactly" in a["checks"]["limits"]
                           for a in answers)

            wait_until(both_degraded, message="both workers to see it")
            assert complete(gateway.url, db.key).status_code == 200  # keys without limits are served

            # A worker that dies is started again, and joins the gateway that serves: the limit it
            # cannot count is refused per request, as the others refuse it, and stops nothing.
            workers = workers_of(gateway.proc.pid)
            assert len(workers) == 2
            os.kill(workers[0], signal.SIGKILL)
            wait_until(lambda: len(set(workers_of(gateway.proc.pid)) - set(workers)) == 1,
                       message="the supervisor to start another worker")
            wait_until(lambda: gateway.log().count("gateway ready on") == 3, message="the new worker to serve")
            assert gateway.proc.poll() is None, gateway.log()
            answers = [complete(gateway.url, key) for _ in range(8)]  # new connections: both workers
            assert {r.status_code for r in answers} == {503}
            assert complete(gateway.url, db.key).status_code == 200


@pytest.mark.parametrize("store", ["redis", "memory"])
def test_the_verdict_comes_first_however_late_it_is_awaited(upstream, clock, store):
    """The limits are asked for before a request is planned, and a shared store's verdict is awaited
    only as the vendor's request is about to leave. Still: a refused request, streamed or not,
    never reaches the vendor; over a limit the answer is the refusal even when the request has a
    mistake of its own (best_of below n, found by the planner); and a mistake under the limits
    frees its slot and counts as a request, as when the limits were checked first."""
    prefix = redis_prefix()
    extra = {"GATEWAY_REDIS_URL": redis_url(), "GATEWAY_REDIS_PREFIX": prefix} if store == "redis" else {}
    with empty_database("sqlite") as url:
        provision(url)
        key, key_id, account = new_key(url)
        run_cli(url, "limits", "set", "--key", key_id, "--rpm", "4", "--concurrent", "1")
        try:
            with GatewayProcess(env_of(upstream, url, clock, **extra), module="tests.support.clocked_gateway") as gateway:
                mistakes = [complete(gateway.url, key, n=2, best_of=1) for _ in range(2)]
                assert [r.status_code for r in mistakes] == [422, 422]  # the first freed its slot for the second
                assert mistakes[0].json()["detail"][0]["loc"] == ["body", "best_of"]
                assert [r.headers["x-ratelimit-remaining-requests"] for r in mistakes] == ["3", "2"]
                served = [complete(gateway.url, key, prompt="served"), complete(gateway.url, key, prompt="streamed",
                                                                                 stream=True)]
                assert [r.status_code for r in served] == [200, 200]
                assert "data: [DONE]" in served[1].text
                assert [r.headers["x-ratelimit-remaining-requests"] for r in served] == ["1", "0"]
                refused = [complete(gateway.url, key, prompt="refused", stream=True),
                           complete(gateway.url, key, prompt="refused"), complete(gateway.url, key, n=2, best_of=1)]
                assert [r.status_code for r in refused] == [429, 429, 429]
                assert {r.json()["error"]["code"] for r in refused} == {"requests_per_minute"}
                assert refused[0].headers["content-type"].startswith("application/json")
                assert [r.headers["x-ratelimit-remaining-requests"] for r in refused] == ["0", "0", "0"]
                sent = [request["body"]["prompt"] for request in upstream.requests]
                assert sent == ["served", "streamed"]  # the refused ones never reached the vendor
        finally:
            remove_redis_keys(prefix)
        rows = wait_for_rows(url, account, 5)
        # the mistakes reached no vendor, so they have no row; the refusals are recorded
        assert requests_in(rows, "completed") == 2 and requests_in(rows, "refused") == 3
