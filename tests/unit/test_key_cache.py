"""gateway/store/key_cache.py, in-process with a lookup the test answers: what it forgets, and how
long an answer is trusted on the keys' wall clock as well as the monotonic one."""

from __future__ import annotations

import asyncio

from gateway.store.accounts import Caller, digest, new_key
from gateway.store.key_cache import KeyCache


def test_a_forgotten_key_is_looked_up_again_and_the_others_stay_cached():
    asked: list[str] = []
    answers = {}

    async def lookup(key_digest: str) -> Caller | None:
        asked.append(key_digest)
        return answers[key_digest]

    async def run() -> None:
        cache = KeyCache(lookup, ttl=3600, clock=lambda: 0.0)
        first, second = new_key(), new_key()
        answers[digest(first)] = Caller("key_1", frozenset({"a"}))
        answers[digest(second)] = Caller("key_2", frozenset({"a"}))
        assert (await cache.caller(first)).key_id == "key_1" and (await cache.caller(second)).key_id == "key_2"
        answers[digest(first)] = Caller("key_1", frozenset({"a"}), ends=0.0)  # revoked meanwhile
        cache.forget("key_1")
        assert (await cache.caller(first)).ends == 0.0 and (await cache.caller(second)).ends is None
        assert asked == [digest(first), digest(second), digest(first)]  # the second stayed cached

    asyncio.run(run())


def test_an_answer_is_trusted_for_its_life_on_the_wall_clock_too_from_when_it_was_asked():
    """A gateway's answer from before a rotation is asked for again once the key cache's life has
    passed on the keys' clock (the one a grace's end is checked against), so a grace at least that
    long ends exactly there; the monotonic clock stands still here."""
    key = new_key()
    answers = {digest(key): Caller("key_1", frozenset({"a"}))}
    wall = [1_000.0]
    began = asyncio.Event()
    answer: list[asyncio.Future] = []

    async def lookup(key_digest: str) -> Caller | None:
        began.set()
        if answer:
            return await answer.pop()
        return answers[key_digest]

    async def run() -> None:
        cache = KeyCache(lookup, ttl=30, clock=lambda: 0.0, wall=lambda: wall[0])
        assert (await cache.caller(key)).ends is None
        answers[digest(key)] = Caller("key_1", frozenset({"a"}), ends=1_030.0, replaced_by="key_2")  # rotated
        wall[0] = 1_029.999
        assert (await cache.caller(key)).ends is None  # still trusted
        wall[0] = 1_030.0
        assert (await cache.caller(key)).ends == 1_030.0  # asked again, at the grace's end at the latest

        # Trusted from when it was asked, not from when the answer came.
        slow = asyncio.get_running_loop().create_future()
        answer.append(slow)
        wall[0] = 1_060.0
        began.clear()
        waiting = asyncio.ensure_future(cache.caller(key))
        await began.wait()
        wall[0] = 1_089.0
        slow.set_result(Caller("key_1", frozenset({"a"}), ends=1_030.0))
        await waiting
        wall[0] = 1_090.0
        answer.append(asyncio.get_running_loop().create_future())
        answer[0].set_result(Caller("key_1", frozenset({"a"}), ends=0.0))
        assert (await cache.caller(key)).ends == 0.0

    asyncio.run(run())
