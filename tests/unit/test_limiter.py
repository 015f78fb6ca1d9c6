"""The limiter between a request and its counters: a settlement is on its way to the store as the
request ends (before anything later from this process), and one the store missed is kept and
replayed, so that nothing a request used is lost. The clock is an argument; nothing sleeps."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from gateway.limits.limiter import Limiter
from gateway.limits.memory_counters import MemoryCounters
from gateway.limits.redis_counters import RedisCounters
from gateway.limits.rules import KEY, TOKENS, Budget, Limits, Period, Subject
from gateway.limits.verdicts import NO_LIMITS
from gateway.store.resp import RedisUnavailable
from tests.support.clocks import start_of_today
from tests.support.redis_servers import RedisServer, commands_run, redis_prefix, redis_url, remove_redis_keys

pytestmark = pytest.mark.redis

NOW = start_of_today()  # a day boundary, and the day Redis lives in (tests/support/)
KEY_A = Subject(KEY, "key_a")
# The command timeout of a test that stops Redis, and how soon its limiter tries the store again: the
# test waits for them, so it names them (a gateway's: redis_counters.COMMAND_TIMEOUT, limiter.RETRY_STORE
# and TICK).
STALL = 0.4


class Table:
    """The part of a LimitsTable the limiter reads, held still."""

    def __init__(self, subjects: dict[Subject, Limits]) -> None:
        self.subjects = subjects
        self.on_change = None

    async def load(self) -> None:
        return None

    def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


def limiter(subjects: dict[Subject, Limits], counters, clock=lambda: NOW) -> Limiter:
    return Limiter(Table(subjects), counters, engine=None, clock=clock)


async def admit(limiter: Limiter, request_id: str, completion_tokens: int = 16):
    return await limiter.ask(key_id=KEY_A.id, account="acct", model="fake/m", prompt_tokens=4,
                             completion_tokens=completion_tokens, request_id=request_id).grant()


def test_a_settlement_goes_out_before_the_next_claim_from_this_process():
    """A request's slot is free for the very next claim, made before anything was awaited: also
    on a Redis that has never seen the scripts (the settlement's must not be loaded only once it
    is found missing, after the next claim has gone out), and again once it knows them."""
    prefix = redis_prefix()
    limits = Limits(concurrent=1, tpm=100)

    async def scenario(url: str):
        counters = RedisCounters(url, prefix)
        limited = limiter({KEY_A: limits}, counters)
        try:
            first = await admit(limited, "cmpl-1")
            assert first.refusal is None and first.windows[KEY_A, "tpm"].remaining == 80
            first.settle({"total_tokens": 5})  # not awaited: the next claim follows it on the connection
            second = await admit(limited, "cmpl-2")
            assert second.refusal is None and second.windows[KEY_A, "tpm"].remaining == 75
            await limited.drain()
        finally:
            await limited.close()

    with RedisServer() as store:  # a Redis of its own: the machine's may know the scripts already
        asyncio.run(scenario(store.url))
        remove_redis_keys(prefix, store.url)
        asyncio.run(scenario(store.url))


class Flaky:
    """Counters whose next `failures` settlements fail as a store that went away would fail them."""

    remote = False

    def __init__(self, inner: MemoryCounters, failures: int) -> None:
        self.inner, self.failures = inner, failures

    async def acquire(self, claim, now):
        return await self.inner.acquire(claim, now)

    def time(self, now):
        return now

    def settle(self, claim, tokens, spent, now, done):
        if self.failures:
            self.failures -= 1
            done(RedisUnavailable("connection to Redis lost"))
            return
        self.inner.settle(claim, tokens, spent, now, done)

    async def close(self) -> None:
        return None


def test_a_settlement_the_store_missed_is_kept_and_replayed():
    limits = Limits(concurrent=5, tpm=100)

    async def scenario():
        counters = Flaky(MemoryCounters(), failures=1)
        limited = limiter({KEY_A: limits}, counters)
        grant = await admit(limited, "cmpl-1", completion_tokens=56)  # reserves 60 tokens
        grant.settle({"total_tokens": 10})
        await limited.drain()
        assert "1 settlements waiting" in limited.not_ready()
        await limited.close()  # replays what waits
        reading = await counters.inner.read(KEY_A, limits, NOW)
        assert reading.tokens.remaining == 90 and reading.in_flight == 0

    asyncio.run(scenario())


def test_a_redis_that_forgot_its_scripts_still_settles_and_a_settlement_reconnects():
    limits = Limits(concurrent=1, tpm=100)

    async def scenario(store: RedisServer):
        counters = RedisCounters(store.url, "t:")
        limited = limiter({KEY_A: limits}, counters)
        try:
            first = await admit(limited, "cmpl-1")
            await counters.client.call("SCRIPT", "FLUSH")  # as after a restart: the scripts are gone
            first.settle({"total_tokens": 5})
            await limited.drain()
            assert limited.not_ready() is None
            second = await admit(limited, "cmpl-2")
            assert second.refusal is None and second.windows[KEY_A, "tpm"].remaining == 75
            await counters.client.close()  # no connection now
            await counters.client.call("SCRIPT", "FLUSH")  # (a new one, for this)
            await counters.client.close()
            second.settle({"total_tokens": 20})  # connects again, then loads the script again
            await limited.drain()
            assert limited.not_ready() is None
            reading = await counters.read(KEY_A, limits, NOW)
            assert reading.tokens.remaining == 75 and reading.in_flight == 0
        finally:
            await limited.close()

    with RedisServer() as store:
        asyncio.run(scenario(store))


async def nothing_in_the_ledger(claim, unseeded) -> None:
    """A limiter's `_seed` without a database: every new budget counter starts from zero."""
    for b in unseeded:
        b.seed = 0


def test_a_claim_in_the_next_period_counts_in_its_own_budget_counter():
    """A key's calls to the store are kept from one claim to the next, but only while the budgets'
    periods stay: the day after, its requests count against the new day's counter."""
    prefix = redis_prefix()
    limits = Limits(tpm=10**6, budgets=(Budget(TOKENS, 1000, "day"),))
    moment = [NOW]

    async def scenario():
        counters = RedisCounters(redis_url(), prefix, callers_clock=True)
        limited = limiter({KEY_A: limits}, counters, clock=lambda: moment[0])
        limited._seed = nothing_in_the_ledger
        try:
            for request, used in (("cmpl-1", 7), ("cmpl-2", 5)):
                grant = await admit(limited, request)
                assert grant.refusal is None
                grant.settle({"total_tokens": used})
                await limited.drain()
            moment[0] = NOW + 86_400  # the next day (UTC)
            grant = await admit(limited, "cmpl-3")
            assert grant.refusal is None
            grant.settle({"total_tokens": 3})
            await limited.drain()
            today = await counters.read(KEY_A, limits, NOW)
            tomorrow = await counters.read(KEY_A, limits, NOW + 86_400)
            assert today.budgets == {f"tokens:{Period.at('day', NOW).id}": (12, 0)}
            assert tomorrow.budgets == {f"tokens:{Period.at('day', NOW + 86_400).id}": (3, 0)}
        finally:
            await limited.close()

    try:
        asyncio.run(scenario())
    finally:
        remove_redis_keys(prefix)


def test_drain_waits_for_every_settlement_sent_and_returns_at_once_when_none_is():
    limits = Limits(concurrent=5, tpm=100)

    async def scenario():
        counters = RedisCounters(redis_url(), prefix, callers_clock=True)
        limited = limiter({KEY_A: limits}, counters)
        try:
            await limited.drain()  # nothing sent: nothing to wait for
            grants = [await admit(limited, f"cmpl-{i}") for i in range(3)]
            for grant in grants:
                grant.settle({"total_tokens": 1})
            assert limited._sending == 3  # written, not yet answered
            await asyncio.gather(limited.drain(), limited.drain())  # (two waiters at once)
            assert limited._sending == 0 and limited.not_ready() is None
            reading = await counters.read(KEY_A, limits, NOW)
            assert reading.in_flight == 0 and reading.tokens.remaining == 97
        finally:
            await limited.close()

    prefix = redis_prefix()
    try:
        asyncio.run(scenario())
    finally:
        remove_redis_keys(prefix)


@pytest.mark.parametrize("heard", [True, False], ids=["clock-heard", "first-claim"])
@pytest.mark.parametrize("policy", ["open", "closed"])
def test_a_claim_redis_runs_after_a_stall_holds_nothing(policy, heard):
    """Redis stopped (SIGSTOP) past the command timeout with a claim on its socket: the limiter
    gives up on it (served uncounted, or refused), Redis runs it once it resumes, and the
    settlement the limiter replays meets it in either order. Afterwards nothing is held: the slot
    is free and the budget holds no reservation (before: a concurrency-1 key locked out for the
    lease, 273 tokens held for the period). Also for a process's first claim, made before it
    has heard Redis's clock (a gateway that just started, beside one that made the counters)."""
    limits = Limits(concurrent=1, budgets=(Budget(TOKENS, 1000, "month"),))
    counter = f"tokens:{Period.at('month', NOW).id}"

    async def scenario(store: RedisServer):
        def process() -> Limiter:
            made = Limiter(Table({KEY_A: limits}), RedisCounters(store.url, "t:", timeout=STALL), engine=None,
                           policy=policy, clock=lambda: NOW, retry_store=STALL / 4, tick=STALL / 4)
            made._seed = nothing_in_the_ledger
            return made

        earlier = process()
        grant = await admit(earlier, "cmpl-0")
        grant.settle({"total_tokens": 3})
        await earlier.drain()
        limited = earlier if heard else process()
        await limited.start()  # its housekeeping replays what the store missed
        try:
            if not heard:
                await earlier.close()
                await limited.counters.client.call("PING")  # connected, the scripts loaded; no clock heard
            before = await commands_run(store.url, "evalsha")
            os.kill(store.proc.pid, signal.SIGSTOP)
            try:
                stalled = await admit(limited, "cmpl-1")  # answered by the policy once the timeout passes
            finally:
                os.kill(store.proc.pid, signal.SIGCONT)
            if policy == "closed":
                assert stalled.refusal is not None and stalled.refusal.kind == "store_down"
            else:
                assert stalled.refusal is None
                stalled.settle({"total_tokens": 9})
            while await commands_run(store.url, "evalsha") <= before:  # Redis has run the claim it was left with
                await asyncio.sleep(0.02)
            while limited.not_ready() is not None or limited._unsettled:  # the limiter replayed its part
                await asyncio.sleep(0.05)
            reading = await limited.counters.read(KEY_A, limits, NOW)
            assert reading.in_flight == 0
            assert reading.budgets[counter] == (3 + (9 if policy == "open" else 0), 0)  # used, reserved
            assert (await admit(limited, "cmpl-2")).refusal is None
        finally:
            await limited.close()

    with RedisServer() as store:
        asyncio.run(asyncio.wait_for(scenario(store), 60))



@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_call_without_a_model_counts_in_its_keys_requests_and_slots_only(store):
    """An administrative call (Limiter.ask_call) takes a request and a slot from the key's own
    counters, those its model requests use; its account's limits do not apply, nor the key's
    token limit (no tokens window) or a budget it has spent."""
    prefix = redis_prefix()
    key_b = Subject(KEY, "key_b")
    account = Subject("account", "acct")
    table = {KEY_A: Limits(rpm=3, tpm=10, concurrent=1), account: Limits(rpm=1),
             key_b: Limits(rpm=5, budgets=(Budget(TOKENS, 1, "day"),))}

    async def spent(claim, unseeded) -> None:  # the ledger says each budget is used up
        for b in unseeded:
            b.seed = 5

    async def scenario():
        counters = MemoryCounters() if store == "memory" else RedisCounters(redis_url(), prefix)
        limited = limiter(table, counters)
        limited._seed = spent
        try:
            model = await admit(limited, "cmpl-1", completion_tokens=1)  # the account's one request
            assert model.refusal is None
            model.settle({"total_tokens": 5})
            await limited.drain()
            call = await limited.ask_call(key_id=KEY_A.id, request_id="admin-1").grant()
            assert call.refusal is None and list(call.windows) == [(KEY_A, "rpm")]  # the same bucket
            assert call.windows[KEY_A, "rpm"].remaining == 1 and [s for s, _ in call.subjects] == [KEY_A]
            held = await limited.ask_call(key_id=KEY_A.id, request_id="admin-2").grant()
            assert held.refusal is not None and held.refusal.kind == "concurrent"  # the first holds the slot
            call.settle(None)
            await limited.drain()
            after = await limited.ask_call(key_id=KEY_A.id, request_id="admin-3").grant()
            assert after.refusal is None and after.windows[KEY_A, "rpm"].remaining == 0
            after.settle(None)
            await limited.drain()
            last = await limited.ask_call(key_id=KEY_A.id, request_id="admin-4").grant()
            assert last.refusal is not None and last.refusal.kind == "rpm"

            broke = await limited.ask(key_id=key_b.id, account="other", model="fake/m", prompt_tokens=1,
                                      completion_tokens=1, request_id="cmpl-2").grant()
            assert broke.refusal is not None and broke.refusal.kind == "budget"
            call = await limited.ask_call(key_id=key_b.id, request_id="admin-5").grant()
            assert call.refusal is None and call.windows[key_b, "rpm"].remaining == 4
            assert limited.ask_call(key_id="key_unlimited", request_id="admin-6") is NO_LIMITS
        finally:
            await limited.close()

    try:
        asyncio.run(scenario())
    finally:
        if store == "redis":
            remove_redis_keys(prefix, redis_url())


class Away:
    """Counters whose store cannot be reached."""

    remote = True

    def time(self, now):
        return now

    def acquire(self, claim, now):
        raise RedisUnavailable("cannot reach Redis")

    async def close(self) -> None:
        return None


@pytest.mark.parametrize("counters", ["several workers without Redis", "Redis away, policy closed"])
def test_an_administrative_call_is_served_when_the_limits_cannot_be_counted(counters):
    """The state an operator mends with administration (and revokes keys during) does not refuse
    it: the call goes through uncounted, where a model request of the same key is refused (503)."""
    from gateway.core.errors import LimitsUnavailable
    from gateway.limits import on_request

    limits = {KEY_A: Limits(rpm=5, concurrent=1)}

    async def scenario():
        if counters == "several workers without Redis":
            limited = Limiter(Table(limits), None, engine=None, workers=2, clock=lambda: NOW)
        else:
            limited = Limiter(Table(limits), Away(), engine=None, policy="closed", clock=lambda: NOW)
        model = await admit(limited, "cmpl-1")
        assert model.refusal is not None and model.refusal.kind in ("unshared", "store_down")
        assert isinstance(on_request._error(model, KEY_A.id, "fake/m"), LimitsUnavailable)  # the model's: a 503
        assert await on_request.admit_call(limited, KEY_A.id, "admin-1") is NO_LIMITS

    asyncio.run(scenario())
