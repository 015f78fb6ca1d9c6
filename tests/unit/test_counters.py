"""The counters behind limits (limits/counters.py), in memory (memory_counters.py) and in the real
Redis (redis_counters.py), held to the same semantics: token buckets per minute, leases, budgets
with reservations; every check atomic. What only a shared store meets (leases nobody renews, clocks
that differ, stalls): tests/unit/test_redis_counters.py. The clock is an argument: the tests move it,
nothing sleeps."""

from __future__ import annotations

import asyncio

import pytest

from gateway.limits import counters
from gateway.limits.counters import settled
from gateway.limits.memory_counters import MemoryCounters
from gateway.limits.redis_counters import RedisCounters
from gateway.limits.rules import TOKENS, Budget, Limits, Period
from tests.support.claims import ACCT, KEY_A, NOW, acquire, claim
from tests.support.redis_servers import redis_prefix, redis_url, remove_redis_keys

pytestmark = pytest.mark.redis


@pytest.fixture(params=["memory", "redis"])
def store(request):
    """What a test's scenario runs on: `store(scenario)` runs `scenario(counters)` in an event loop
    (the Redis client belongs to the loop it was opened in)."""
    prefix = redis_prefix()

    def run(scenario):
        async def main():
            opened = (MemoryCounters() if request.param == "memory"
                      else RedisCounters(redis_url(), prefix, callers_clock=True))
            try:
                await scenario(opened)
            finally:
                await opened.close()

        asyncio.run(main())

    yield run
    if request.param == "redis":
        remove_redis_keys(prefix)


def test_requests_per_minute_is_a_bucket_that_refills(store):
    limits = Limits(rpm=10)

    async def scenario(store):
        verdicts = [await acquire(store, claim((KEY_A, limits))) for _ in range(11)]
        assert [v.refusal is None for v in verdicts] == [True] * 10 + [False]
        refusal = verdicts[-1].refusal
        assert refusal.kind == counters.RPM and refusal.limit == 10 and refusal.subject == KEY_A
        assert refusal.retry_after == pytest.approx(6.0)
        assert verdicts[0].windows[KEY_A, "rpm"].remaining == 9
        assert verdicts[9].windows[KEY_A, "rpm"].remaining == 0
        assert verdicts[9].windows[KEY_A, "rpm"].reset == pytest.approx(60.0)
        assert (await acquire(store, claim((KEY_A, limits)), NOW + 5.9)).refusal is not None
        assert (await acquire(store, claim((KEY_A, limits)), NOW + 6.0)).refusal is None
        assert (await acquire(store, claim((KEY_A, limits)), NOW + 6.1)).refusal is not None

    store(scenario)


def test_tokens_per_minute_reserve_the_estimate_and_settle_to_the_usage(store):
    limits = Limits(tpm=100)

    async def scenario(store):
        first = claim((KEY_A, limits), tokens=60)
        assert (await acquire(store, first)).windows[KEY_A, "tpm"].remaining == 40
        second = claim((KEY_A, limits), tokens=60)
        refused = (await acquire(store, second)).refusal
        assert refused.kind == counters.TPM and refused.wanted == 60
        assert refused.retry_after == pytest.approx(20 * 60 / 100)
        await settled(store, first, 10, {}, NOW)  # it used 10 of the 60 it reserved
        verdict = await acquire(store, second)
        assert verdict.refusal is None and verdict.windows[KEY_A, "tpm"].remaining == 30
        await settled(store, second, 150, {}, NOW)  # more than reserved: the bucket goes below zero
        reading = await store.read(KEY_A, limits, NOW)
        assert reading.tokens.remaining == 0 and reading.tokens.reset == pytest.approx(60 * 160 / 100)

    store(scenario)


def test_a_request_larger_than_the_minute_allows_is_refused_for_good(store):
    async def scenario(store):
        verdict = await acquire(store, claim((KEY_A, Limits(tpm=100)), tokens=101))
        assert verdict.refusal.kind == counters.TOO_LARGE and verdict.refusal.retry_after is None

    store(scenario)


def test_concurrency_is_released_by_settlement(store):
    limits = Limits(concurrent=2)

    async def scenario(store):
        held = [claim((KEY_A, limits)) for _ in range(3)]
        assert (await acquire(store, held[0])).refusal is None
        assert (await acquire(store, held[1])).refusal is None
        refused = (await acquire(store, held[2])).refusal
        assert refused.kind == counters.CONCURRENT and refused.retry_after == counters.RETRY_IN_FLIGHT
        await settled(store, held[0], 0, {}, NOW)
        assert (await acquire(store, held[2])).refusal is None
        assert (await store.read(KEY_A, limits, NOW)).in_flight == 2

    store(scenario)


def test_a_budget_starts_from_its_seed_and_tells_spent_from_held(store):
    budget = Budget(TOKENS, 100, "day")
    limits = Limits(budgets=(budget,))
    counter = f"tokens:{Period.at('day', NOW).id}"

    async def scenario(store):
        unseeded = claim((KEY_A, limits), tokens=60, seed=None)
        assert (await store.acquire(unseeded, NOW)).unseeded == unseeded.charges[0].budgets
        first = claim((KEY_A, limits), tokens=60, seed=20)  # 20 used earlier today, says the ledger
        assert (await acquire(store, first)).refusal is None
        held = (await acquire(store, claim((KEY_A, limits), tokens=30))).refusal
        assert held.kind == counters.BUDGET_IN_FLIGHT and (held.used, held.reserved, held.wanted) == (20, 60, 30)
        await settled(store, first, 50, {counter: 50}, NOW)
        spent = (await acquire(store, claim((KEY_A, limits), tokens=31))).refusal
        assert spent.kind == counters.BUDGET and spent.used == 70 and spent.retry_after is None
        assert spent.unit == "tokens"
        assert (await acquire(store, claim((KEY_A, limits), tokens=30))).refusal is None
        assert (await store.read(KEY_A, limits, NOW)).budgets == {counter: (70, 30)}
        tomorrow = NOW + 86_400
        assert (await store.acquire(claim((KEY_A, limits), tokens=30, at=tomorrow, seed=None), tomorrow)).unseeded

    store(scenario)


def test_key_and_account_both_apply_and_a_refusal_takes_nothing(store):
    key_limits, account_limits = Limits(rpm=5), Limits(rpm=3, concurrent=10)

    async def scenario(store):
        verdicts = [await acquire(store, claim((KEY_A, key_limits), (ACCT, account_limits))) for _ in range(4)]
        assert [v.refusal is None for v in verdicts] == [True, True, True, False]
        assert verdicts[-1].refusal.subject == ACCT
        assert verdicts[2].windows[KEY_A, "rpm"].remaining == 2 and verdicts[2].windows[ACCT, "rpm"].remaining == 0
        # the account refused the fourth: the key's bucket and the account's leases kept what they had
        assert (await store.read(KEY_A, key_limits, NOW)).requests.remaining == 2
        assert (await store.read(ACCT, account_limits, NOW)).in_flight == 3

    store(scenario)


def test_the_refusal_told_is_the_one_no_retry_helps_else_the_longest_wait():
    rpm = counters.Refusal(KEY_A, counters.RPM, 1, 3.0)
    tpm = counters.Refusal(ACCT, counters.TPM, 1, 9.0)
    budget = counters.Refusal(ACCT, counters.BUDGET, 1)
    assert counters.choose([rpm, tpm]) is tpm
    assert counters.choose([rpm, budget, tpm]) is budget


def test_large_amounts_and_empty_reservations_stay_exact(store):
    """Amounts past what Lua writes as digits by default (1e+15), and reservations of nothing."""
    big = 10**15
    limits = Limits(tpm=10**12, budgets=(Budget(TOKENS, big, "month"),))
    counter = f"tokens:{Period.at('month', NOW).id}"

    async def scenario(store):
        nothing = claim((KEY_A, limits), tokens=0, seed=big - 7)
        assert (await acquire(store, nothing)).refusal is None
        await settled(store, nothing, 0, {counter: 0}, NOW)
        some = claim((KEY_A, limits), tokens=7)
        verdict = await acquire(store, some)
        assert verdict.refusal is None and verdict.windows[KEY_A, "tpm"].remaining == 10**12 - 7
        await settled(store, some, 7, {counter: 7}, NOW)
        assert (await store.read(KEY_A, limits, NOW)).budgets == {counter: (big, 0)}
        refused = (await acquire(store, claim((KEY_A, limits), tokens=1))).refusal
        assert refused.kind == counters.BUDGET and refused.used == big

    store(scenario)
