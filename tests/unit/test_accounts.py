"""gateway/store/accounts.py's key cache, in-process with a lookup the test answers: what it forgets."""

from __future__ import annotations

import asyncio

from gateway.store.accounts import Caller, KeyCache, digest, new_key


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
