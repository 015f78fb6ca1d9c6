"""The counters in Redis (limits/redis_counters.py and its scripts, redis_scripts.py) where only a
shared store is tested: a lease nobody renews expires, hosts whose clocks differ count by Redis's,
a claim Redis runs after its caller gave up (a stall) or after its settlement takes nothing, and a
budget's seed counts each recent ledger row once, even with several processes seeding at once. The
semantics both stores share: tests/unit/test_counters.py."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import redis

from gateway.limits import counters
from gateway.limits.counters import settled
from gateway.limits.redis_counters import LEASE_SECONDS, LateClaim, RedisCounters
from gateway.limits.rules import TOKENS, Budget, Limits, Period
from gateway.store.resp import RedisUnavailable
from tests.support.claims import ACCT, KEY_A, NOW, acquire, claim
from tests.support.redis_servers import RedisServer, commands_run, redis_prefix, redis_url, remove_redis_keys

pytestmark = pytest.mark.redis

# The command timeout of a test that stops Redis: the test waits for it, so it names it (a gateway's
# is redis_counters.COMMAND_TIMEOUT).
STALL = 0.4


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
        earlier = RedisCounters(server.url, "t:", timeout=STALL)
        made = claim((KEY_A, limits), tokens=50)
        assert (await acquire(earlier, made)).refusal is None
        await settled(earlier, made, 5, {counter: 5}, NOW)
        store = earlier if heard else RedisCounters(server.url, "t:", timeout=STALL)
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
