"""The counters behind limits, in memory and in the real Redis, held to the same semantics: token
buckets per minute, leases, budgets with reservations; every check atomic. The clock is an
argument: the tests move it, nothing sleeps."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal

import pytest
import redis

from gateway.limits import counters
from gateway.limits.counters import BudgetClaim, Charge, Claim, settled
from gateway.limits.memory_counters import MemoryCounters
from gateway.limits.redis_counters import LEASE_SECONDS, LateClaim, RedisCounters
from gateway.limits.rules import ACCOUNT, KEY, TOKENS, Budget, Limits, Period, Subject
from gateway.store.resp import RedisUnavailable
from tests.support.clocks import start_of_today
from tests.support.redis_servers import RedisServer, commands_run, redis_prefix, redis_url, remove_redis_keys

pytestmark = pytest.mark.redis

NOW = start_of_today()  # a day boundary, and the day Redis lives in (tests/support/)
KEY_A = Subject(KEY, "key_a")
ACCT = Subject(ACCOUNT, "acct")
_ids = itertools.count()


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


def claim(*charges: tuple[Subject, Limits], tokens: int = 0, at: float = NOW, seed: int | None = 0,
          reserve: int | None = None) -> Claim:
    return Claim(f"cmpl-{next(_ids)}", tokens, [
        Charge(subject, limits, [BudgetClaim(b, Period.at(b.period, at), tokens if reserve is None else reserve, seed)
                                 for b in limits.budgets]) for subject, limits in charges])


async def acquire(store, c: Claim, now: float = NOW):
    verdict = await store.acquire(c, now)
    assert not verdict.unseeded
    return verdict


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


def test_a_lease_nobody_renews_frees_its_slot_and_its_reservation():
    """A process that died holding requests in flight: Redis forgets them after the lease."""
    prefix = redis_prefix()
    limits = Limits(concurrent=1, budgets=(Budget(TOKENS, 100, "month"),))

    async def scenario():
        store = RedisCounters(redis_url(), prefix, callers_clock=True)
        try:
            dead, alive = claim((KEY_A, limits), tokens=80), claim((KEY_A, limits), tokens=80)
            assert (await acquire(store, dead)).refusal is None
            assert (await acquire(store, alive, NOW + 10)).refusal.kind in (counters.CONCURRENT,
                                                                            counters.BUDGET_IN_FLIGHT)
            renewed = claim((ACCT, Limits(concurrent=1)))
            assert (await acquire(store, renewed)).refusal is None
            await store.renew([renewed], NOW + LEASE_SECONDS - 1)
            later = NOW + LEASE_SECONDS + 1
            assert (await acquire(store, alive, later)).refusal is None
            assert (await acquire(store, claim((ACCT, Limits(concurrent=1))), later)).refusal is not None
            counter = f"tokens:{Period.at('month', NOW).id}"
            assert (await store.read(KEY_A, limits, later)).budgets == {counter: (0, 80)}
            await settled(store, dead, 5, {counter: 5}, later)  # it was alive after all: its usage counts once
            assert (await store.read(KEY_A, limits, later)).budgets == {counter: (5, 80)}
        finally:
            await store.close()
            remove_redis_keys(prefix)

    asyncio.run(scenario())


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


def test_two_hosts_whose_clocks_differ_share_one_bucket_by_redis_s_clock():
    """The scripts read Redis's TIME: a host 30 s ahead neither refills the shared bucket early
    nor makes another host's claims look old (with the callers' clocks, an `rpm 20` key admitted
    every request of two hosts 30 s apart)."""
    prefix = redis_prefix()
    limits = Limits(rpm=20)

    async def scenario():
        here, ahead = RedisCounters(redis_url(), prefix), RedisCounters(redis_url(), prefix)
        try:
            admitted = 0
            for i in range(40):  # turn about: each host stamps its claims with its own clock
                store, now = (here, NOW) if i % 2 == 0 else (ahead, NOW + 30 + i)
                admitted += (await acquire(store, claim((KEY_A, limits)), now)).refusal is None
            assert admitted == 20
        finally:
            await here.close()
            await ahead.close()

    try:
        asyncio.run(scenario())
    finally:
        remove_redis_keys(prefix)


@pytest.mark.parametrize("heard", [True, False], ids=["clock-heard", "first-claim"])
def test_a_claim_redis_runs_after_its_caller_gave_up_takes_nothing(heard):
    """Redis stopped (SIGSTOP) with a claim on its socket until the caller's command timeout has
    passed: once resumed, Redis runs it past its deadline and takes nothing, though nobody settles
    it. Also a process's very first claim, sent before it had heard Redis's clock (it learns the
    clock first)."""
    limits = Limits(concurrent=1, budgets=(Budget(TOKENS, 1000, "month"),))
    counter = f"tokens:{Period.at('month', NOW).id}"

    async def scenario(server: RedisServer):
        earlier = RedisCounters(server.url, "t:")
        made = claim((KEY_A, limits), tokens=50)
        assert (await acquire(earlier, made)).refusal is None
        await settled(earlier, made, 5, {counter: 5}, NOW)
        store = earlier if heard else RedisCounters(server.url, "t:")
        try:
            if not heard:
                await store.client.call("PING")  # connected; the clock not heard yet
            # what Redis is left with: the claim, or (the clock not heard) the question of its time
            command = "evalsha" if heard else "time"
            before = await commands_run(server.url, command)
            os.kill(server.proc.pid, signal.SIGSTOP)
            try:
                with pytest.raises((RedisUnavailable, TimeoutError)):
                    await store.acquire(claim((KEY_A, limits), tokens=50), NOW)
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            while await commands_run(server.url, command) <= before:  # Redis ran what it was left with
                await asyncio.sleep(0.02)
            reading = await earlier.read(KEY_A, limits, NOW)
            assert reading.in_flight == 0 and reading.budgets == {counter: (5, 0)}
        finally:
            await store.close()
            await earlier.close()

    with RedisServer() as server:
        asyncio.run(asyncio.wait_for(scenario(server), 60))


def test_a_claim_whose_settlement_came_first_takes_nothing():
    """A settlement replayed on a new connection may reach Redis before the claim it settles
    (left on the old connection's socket by a stall): the claim then takes nothing."""
    limits = Limits(concurrent=1, budgets=(Budget(TOKENS, 1000, "month"),))
    counter = f"tokens:{Period.at('month', NOW).id}"
    prefix = redis_prefix()

    async def scenario():
        store = RedisCounters(redis_url(), prefix, callers_clock=True)
        try:
            made = claim((KEY_A, limits), tokens=5)
            assert (await acquire(store, made)).refusal is None  # the counter exists
            await settled(store, made, 5, {counter: 5}, NOW)
            overtaken = claim((KEY_A, limits), tokens=50)
            await settled(store, overtaken, 0, {counter: 0}, NOW)
            with pytest.raises(LateClaim):
                await store.acquire(overtaken, NOW)
            reading = await store.read(KEY_A, limits, NOW)
            assert reading.in_flight == 0 and reading.budgets == {counter: (5, 0)}
            assert (await acquire(store, claim((KEY_A, limits), tokens=50))).refusal is None
        finally:
            await store.close()

    try:
        asyncio.run(scenario())
    finally:
        remove_redis_keys(prefix)


def test_a_seed_counts_each_recent_row_once_whether_its_settlement_came_before_or_after():
    """A Redis restarted empty: the outage's settlements replayed before any claim seeds the
    counter, the rows of the last moments told by id with the seed. Each request counts once:
    by its settlement (x, replayed first), by its row (y, whose settlement comes later and only
    frees its slot), or by the seed's sum (old)."""
    limits = Limits(concurrent=1, budgets=(Budget(TOKENS, 1000, "month"),))
    counter = f"tokens:{Period.at('month', NOW).id}"
    prefix = redis_prefix()

    async def scenario():
        store = RedisCounters(redis_url(), prefix, callers_clock=True)
        try:
            x, y = claim((KEY_A, limits), tokens=50), claim((KEY_A, limits), tokens=50)
            await settled(store, x, 7, {counter: 7}, NOW + 5)  # no counter yet: kept by its end
            seeding = claim((KEY_A, limits), tokens=10, seed=100)
            seeding.charges[0].budgets[0].seeded = NOW + 1
            seeding.charges[0].budgets[0].recent = {x.request_id: 7, y.request_id: 11}
            assert (await acquire(store, seeding, NOW + 6)).refusal is None
            assert (await store.read(KEY_A, limits, NOW + 6)).budgets == {counter: (118, 10)}
            await settled(store, seeding, 3, {counter: 3}, NOW + 7)
            await settled(store, y, 11, {counter: 11}, NOW + 8)  # its row is in the seed already
            assert (await store.read(KEY_A, limits, NOW + 8)).budgets == {counter: (121, 0)}
        finally:
            await store.close()

    try:
        asyncio.run(scenario())
    finally:
        remove_redis_keys(prefix)


def test_processes_seeding_one_counter_at_once_keep_to_their_own_recent_rows():
    """Redis back empty, and two processes seed one counter at the same moment, each with the
    ledger as it read it (the later one's seed holds more rows, its recent rows fewer): both have
    written their recent rows before either claim runs. The counter holds the first claim's
    seed and its recent rows, each request once; the second's rows do not replace the first's."""
    limits = Limits(budgets=(Budget(TOKENS, 1000, "month"),))
    counter = f"tokens:{Period.at('month', NOW).id}"
    prefix = redis_prefix()

    async def scenario():
        first, second = (RedisCounters(redis_url(), prefix, callers_clock=True) for _ in range(2))
        try:
            early = claim((KEY_A, limits), tokens=10, seed=100)  # read the ledger first: a, b recent
            early.charges[0].budgets[0].recent = {"cmpl-a": 7, "cmpl-b": 11}
            late = claim((KEY_A, limits), tokens=10, seed=107)  # a moment later: a in its seed
            late.charges[0].budgets[0].recent = {"cmpl-b": 11}
            await first.write_recent(early)
            await second.write_recent(late)
            assert (await acquire(first, early)).refusal is None
            assert (await acquire(second, late)).refusal is None
            assert (await first.read(KEY_A, limits, NOW)).budgets == {counter: (118, 20)}
            keys = redis.Redis.from_url(redis_url()).keys(f"{prefix}*:recent:*")
            assert len(keys) == 1  # the second's, unread (its counter was seeded): it expires
        finally:
            await first.close()
            await second.close()

    try:
        asyncio.run(scenario())
    finally:
        remove_redis_keys(prefix)
