"""The response cache in-process: its key and what may be cached (gateway/http/cache.py), its entry
and a stream put back together (gateway/http/cache_relay.py), and its stores
(gateway/store/response_cache.py), memory with an injected clock, Redis with a server of the
test's own that it stops."""

from __future__ import annotations

import asyncio

import pytest
from starlette.datastructures import Headers

from gateway.core.endpoint import Endpoint
from gateway.core.chat import ChatChoice
from gateway.core.completion import Choice, Chunk, Usage
from gateway.core.errors import ValidationFailed
from gateway.endpoints.chat import unit as chat
from gateway.endpoints.completions import unit as completions
from gateway.endpoints.unit import cache_form
from gateway.http import cache, cache_relay
from gateway.store.response_cache import MemoryStore, RedisStore
from tests.support.clocks import ManualClock
from tests.support.redis_servers import RedisServer


def completion_form(**body):
    return cache_form({"model": "local/m", "prompt": "Hi", **body}, completions.DEFAULTS)


def chat_form(body):
    return cache_form(body, chat.DEFAULTS)


def completion_key(account="acct", model="local/m", **body):
    return cache.key(Endpoint.COMPLETIONS, account, model, completion_form(**body))


# -- the key -----------------------------------------------------------------------------------
def test_a_default_given_or_left_out_is_the_same_request():
    assert completion_key(temperature=0) == completion_key(temperature=0, max_tokens=16, n=1, echo=False, top_p=1)
    assert completion_key(temperature=0, best_of=1) == completion_key(temperature=0)
    assert completion_key(temperature=0, n=2, best_of=2) == completion_key(temperature=0, n=2)
    assert completion_key(temperature=0.0, stop=[], logit_bias={}, seed=None) == completion_key(temperature=0)


def test_field_order_is_irrelevant_and_delivery_fields_are_left_out():
    a = {"model": "openai/x", "messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "max_tokens": 5}
    b = {"max_tokens": 5, "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
         "user": "someone", "messages": [{"content": "Hi", "role": "user"}], "model": "openai/x"}
    assert cache.key(Endpoint.CHAT, "acct", "openai/x", chat_form(a)) == \
        cache.key(Endpoint.CHAT, "acct", "openai/x", chat_form(b))
    assert completion_key(temperature=0, stream=True, user="u") == completion_key(temperature=0)


def test_the_key_changes_with_what_makes_the_answer_and_whose_it_is():
    base = completion_key(temperature=0)
    assert completion_key(temperature=0, max_tokens=17) != base
    assert completion_key(temperature=0, logprobs=1) != base
    assert completion_key(account="other", temperature=0) != base
    assert completion_key(model="local/n", temperature=0) != base
    assert cache.key(Endpoint.CHAT, "acct", "local/m", completion_form(temperature=0)) != base


def test_only_greedy_or_seeded_requests_are_deterministic():
    assert cache.deterministic(completion_form(temperature=0))
    assert cache.deterministic(completion_form(seed=7))
    assert not cache.deterministic(completion_form())  # temperature defaults to 1
    assert not cache.deterministic(completion_form(temperature=0.7))
    assert cache.deterministic(chat_form({"model": "x", "messages": [], "temperature": 0}))
    assert not cache.deterministic(chat_form({"model": "x", "messages": []}))


def test_the_request_headers_are_read_and_a_wrong_one_is_named():
    assert cache.asked(Headers({})) == (None, None)
    assert cache.asked(Headers({"x-gateway-cache": "only-if-cached", "x-gateway-cache-ttl": "60"})) == \
        ("only-if-cached", 60.0)
    with pytest.raises(ValidationFailed) as bad:
        cache.asked(Headers({"x-gateway-cache": "sometimes"}))
    assert bad.value.detail[0]["loc"] == ["header", "x-gateway-cache"]
    for ttl in ("0", "-3", "soon", str(cache.MAX_TTL + 1)):
        with pytest.raises(ValidationFailed) as bad:
            cache.asked(Headers({"x-gateway-cache-ttl": ttl}))
        assert bad.value.detail[0]["loc"] == ["header", "x-gateway-cache-ttl"]


# -- entries -----------------------------------------------------------------------------------
LOGPROBS = {"tokens": ["a", "b"], "token_logprobs": [None, -0.25], "top_logprobs": [None, {"b": -0.25}],
            "text_offset": [0, 1]}


def test_an_entry_reads_back_as_it_was_kept_and_an_other_version_not_at_all():
    entry = cache.Entry([Choice(0, "ab", "length", LOGPROBS)], Usage(2, 1, {"cached_tokens": 1}), "fp")
    again = cache.decode(cache.encode(entry), chat=False)
    assert again == entry and again.choices[0] is not entry.choices[0]
    chat = cache.Entry([ChatChoice(0, "Hello", "stop", None, refusal=None)], Usage(5, 1))
    assert cache.decode(cache.encode(chat), chat=True) == chat
    assert cache.decode(cache.encode(entry).replace(b'"v":2', b'"v":1'), chat=False) is None  # another version's
    assert cache.decode(b"not json", chat=False) is None


CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}


def test_what_is_not_kept_an_estimate_no_usage_a_tool_call_not_whole():
    assert cache.storable([Choice(0, "x")], Usage(1, 1))
    assert not cache.storable([Choice(0, "x")], None)
    assert not cache.storable([Choice(0, "x")], Usage(1, 1, estimated=True))
    assert cache.storable([ChatChoice(0, "", "tool_calls", tool_calls=[CALL])], Usage(1, 1))
    assert not cache.storable([ChatChoice(0, "", tool_calls=[{"id": "t"}])], Usage(1, 1))  # no function name
    assert not cache.storable([ChatChoice(0, "", tool_calls=[CALL | {"index": 0}])], Usage(1, 1))  # a piece
    entry = cache.Entry([ChatChoice(0, "", "tool_calls", tool_calls=[CALL], function_call=None)], Usage(5, 1))
    assert cache.decode(cache.encode(entry), chat=True) == entry


def test_a_streamed_tool_call_is_kept_whole_and_streams_in_one_piece():
    collected = cache_relay.Collected()
    collected.add([Chunk([ChatChoice(0, "", tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                                                         "function": {"name": "get_weather", "arguments": ""}}])])])
    collected.add([Chunk([ChatChoice(0, "", tool_calls=[{"index": 0, "function": {"arguments": '{"city": '}}])])])
    collected.add([Chunk([ChatChoice(0, "", tool_calls=[{"index": 0, "function": {"arguments": '"Oslo"}'}}])])])
    collected.add([Chunk([ChatChoice(0, "", "tool_calls")]), Chunk([], usage=Usage(3, 4))])
    collected.complete = True
    entry = collected.entry()
    assert entry is not None and entry.choices[0].tool_calls == [CALL]
    assert entry.choices[0].finish_reason == "tool_calls"
    (text,) = [chunk for chunk in cache.chunks(entry) if any(c.tool_calls for c in chunk.choices)]
    assert text.choices[0].tool_calls == [{"index": 0} | CALL]
    broken = cache_relay.Collected()  # a piece before its call's first (no id, no name): not kept
    broken.add([Chunk([ChatChoice(0, "", tool_calls=[{"index": 0, "function": {"arguments": "{}"}}])]),
                Chunk([], usage=Usage(1, 1))])
    broken.complete = True
    assert broken.entry() is None


def test_a_stream_put_back_together_is_its_whole_answer():
    collected = cache_relay.Collected()
    collected.add([Chunk([Choice(0, "a", None, {"tokens": ["a"], "token_logprobs": [None]}), Choice(1, "x")])])
    collected.add([Chunk([Choice(0, "b", "stop", {"tokens": ["b"], "token_logprobs": [-0.5]}),
                          Choice(1, "y", "length")])])
    collected.add([Chunk([Choice(0, "", "stop")]), Chunk([], usage=Usage(3, 4))])
    assert collected.entry() is None  # not ended by the vendor yet
    collected.complete = True
    entry = collected.entry()
    assert entry is not None
    assert entry.choices == [Choice(0, "ab", "stop", {"tokens": ["a", "b"], "token_logprobs": [None, -0.5]}),
                             Choice(1, "xy", "length")]
    assert entry.usage == Usage(3, 4)


class Copies:
    """Counts what concatenations copy: characters of texts, items of lists (`+` makes a new one)."""

    count = 0

    @classmethod
    def text(cls, value: str) -> str:
        return _CountedText(value)

    @classmethod
    def items(cls, *values) -> list:
        return _CountedList(values)


class _CountedText(str):
    def __add__(self, other):
        Copies.count += len(self) + len(other)
        return str.__add__(self, other)

    def __radd__(self, other):
        Copies.count += len(other) + len(self)
        return str.__add__(other, self)


class _CountedList(list):
    def __add__(self, other):
        Copies.count += len(self) + len(other)
        return list(self) + list(other)

    def __radd__(self, other):
        Copies.count += len(other) + len(self)
        return list(other) + list(self)


def _stream(pieces: int) -> list[list[Chunk]]:
    """A stream's batches of `pieces` pieces per choice: a tool call's arguments and a deprecated
    function's, chat content with its logprobs and a refusal, and a completion with legacy logprobs."""
    token = {"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": Copies.text("")}}
    batches = [[Chunk([ChatChoice(0, "", tool_calls=Copies.items(call)),
                       ChatChoice(1, "", function_call={"name": "g", "arguments": Copies.text("")}),
                       ChatChoice(2, Copies.text(""), logprobs={"content": Copies.items(), "refusal": None}),
                       Choice(3, Copies.text(""), logprobs={"tokens": Copies.items(),
                                                             "token_logprobs": Copies.items()})])]]
    for _ in range(pieces):
        batches.append([Chunk([
            ChatChoice(0, "", tool_calls=Copies.items({"index": 0, "function": {"arguments": Copies.text("7,")}})),
            ChatChoice(1, "", function_call={"arguments": Copies.text("8,")}),
            ChatChoice(2, Copies.text("a"), logprobs={"content": Copies.items(token), "refusal": None},
                       refusal=Copies.text("r")),
            Choice(3, Copies.text("b"), logprobs={"tokens": Copies.items("b"),
                                                  "token_logprobs": Copies.items(-0.5)})])])
    batches.append([Chunk([ChatChoice(0, "", "tool_calls"), ChatChoice(1, "", "function_call"),
                           ChatChoice(2, "", "stop"), Choice(3, "", "length")]), Chunk([], usage=Usage(3, 4))])
    return batches


@pytest.mark.parametrize("pieces", [1_000, 4_000])
def test_a_stream_is_collected_in_work_linear_in_its_pieces(pieces):
    """Nothing a stream collected is copied again for each piece that follows (that was quadratic:
    docs/performance.md): what concatenations copy stays within what the stream carried."""
    batches = _stream(pieces)
    Copies.count = 0
    collected = cache_relay.Collected()
    for batch in batches:
        collected.add(batch)
    collected.complete = True
    entry = collected.entry()
    carried = pieces * 8  # characters and items the pieces carry, one or two each per choice
    assert Copies.count <= carried, f"{Copies.count} copied for {carried} carried"
    assert entry is not None
    calls, function, chat, legacy = entry.choices
    assert calls.tool_calls == [{"id": "call_1", "type": "function", "function": {"name": "f",
                                                                                  "arguments": "7," * pieces}}]
    assert function.function_call == {"name": "g", "arguments": "8," * pieces}
    assert (chat.text, chat.refusal, len(chat.logprobs["content"])) == ("a" * pieces, "r" * pieces, pieces)
    assert (legacy.text, legacy.logprobs["tokens"], legacy.finish_reason) == ("b" * pieces, ["b"] * pieces, "length")
    sent = batches[1][0].choices  # the pieces, sent to the client too, are left as they are
    assert (sent[0].tool_calls[0]["function"]["arguments"], sent[2].text, len(sent[2].logprobs["content"])) == \
        ("7,", "a", 1)


def test_a_hit_streams_as_a_vendor_would():
    entry = cache.Entry([ChatChoice(0, "Hi", "stop"), ChatChoice(1, "Yo", "length")], Usage(3, 2))
    chunks = cache.chunks(entry)
    assert [[c.text for c in chunk.choices] for chunk in chunks] == [["", ""], ["Hi", "Yo"], ["", ""], []]
    assert [[c.finish_reason for c in chunk.choices] for chunk in chunks[:3]] == \
        [[None, None], [None, None], ["stop", "length"]]
    assert chunks[-1].usage == chunks[-1].billed == Usage(3, 2)
    assert entry.choices[0].finish_reason == "stop"  # the entry's own choices are left as they are


def test_a_hit_asks_the_limits_for_a_request_billed_a_share_of_its_entrys_tokens():
    """(The limiter reserves none of them as tokens, and the share of their price in dollars:
    tests/unit/test_limits.py.)"""
    from gateway.core.demand import Demand

    demand = Demand(Endpoint.COMPLETIONS, "local/m", ["a prompt"], 64, streamed=True, user="u")
    assert cache.Lookup(cache.MISS).demand(demand) is demand
    hit = cache.Lookup(cache.HIT, entry=cache.Entry([Choice(0, "x")], Usage(3, 5)), price_share=0.25).demand(demand)
    assert (hit.prompt_tokens, hit.completion_tokens, hit.hit_share, hit.streamed, hit.user) == (3, 5, 0.25, True, "u")
    assert hit.prompts_sent == ()  # nothing to count: the entry's usage is known


# -- the stores --------------------------------------------------------------------------------
def test_memory_entries_expire_by_the_injected_clock():
    clock = ManualClock(100.0)
    store = MemoryStore(10, 1 << 20, 1 << 10, clock=clock)

    async def run():
        assert await store.put("k", b"v", ttl=5)
        assert await store.get("k") == b"v"
        clock.advance(4.9)
        assert await store.get("k") == b"v"
        clock.advance(0.1)
        assert await store.get("k") is None
        assert store.held_bytes == 0

    asyncio.run(run())


def test_memory_is_bounded_by_entries_bytes_and_entry_size():
    store = MemoryStore(max_entries=2, max_bytes=30, max_entry_bytes=12)

    async def run():
        assert not await store.put("big", b"x" * 10, ttl=60)  # 13 bytes with its key: over the entry bound
        assert await store.put("a", b"1" * 9, ttl=60)
        assert await store.put("b", b"2" * 9, ttl=60)
        assert await store.get("a") is not None  # a is now the most recently used
        assert await store.put("c", b"3" * 9, ttl=60)  # two entries at most: b goes
        assert (await store.get("b"), len(store)) == (None, 2)
        assert await store.put("d", b"4" * 11, ttl=60)
        assert await store.put("e", b"5" * 11, ttl=60)  # 36 bytes > 30: the oldest go until it fits
        assert len(store) == 2 and store.held_bytes == 24 and await store.get("a") is None

    asyncio.run(run())


def test_redis_keeps_entries_for_their_time_and_an_outage_is_a_miss():
    server = RedisServer().start()
    try:
        async def run():
            clock = ManualClock()
            store = RedisStore(server.url, "t:", max_entry_bytes=64, clock=clock)
            try:
                assert await store.put("k", b'{"v":1}', ttl=30)
                assert await store.get("k") == b'{"v":1}'
                assert await store.get("absent") is None
                assert not await store.put("big", b"x" * 100, ttl=30)
                server.stop()
                assert await store.get("k") is None  # a miss, not an error
                assert not await store.put("k", b"x", ttl=30)
                server.start()  # back, but left alone for a second after the failure
                assert not await store.put("k", b"x", ttl=30)
                clock.advance(1.0)
                assert await store.put("k", b"again", ttl=30) and await store.get("k") == b"again"
            finally:
                await store.close()

        asyncio.run(run())
    finally:
        server.stop()

    import redis

    with RedisServer() as other:  # its time to live is Redis's
        async def kept():
            store = RedisStore(other.url, "t:", max_entry_bytes=64)
            try:
                await store.put("k", b"v", ttl=30)
            finally:
                await store.close()

        asyncio.run(kept())
        ttl = redis.Redis(port=other.port).pttl("t:cache:k")
        assert 0 < ttl <= 30_000


# -- a hit in the ledger -----------------------------------------------------------------------
def test_a_hit_is_a_cache_hit_row_at_its_share_of_the_price_and_a_cut_hit_bills_nothing():
    from gateway.core.completion import Attempt
    from gateway.core.config import PriceConfig
    from gateway.store import database
    from gateway.store.accounts import bootstrap
    from gateway.store.ledger import Ledger
    from gateway.store.prices import Prices
    from tests.support.provision import empty_database, ledger_rows

    prices = Prices.load({"v/paid": [PriceConfig(input=2, output=10)]})  # USD per million tokens
    attempt = Attempt(vendor="v", model="v/paid", streamed=False, end_user=None, prompts_sent=("a b",))

    async def meter_requests(url: str) -> None:
        engine = database.connect(url)
        try:
            await database.prepare(engine, bootstrap)
            ledger = Ledger(engine, max_pending=10, prices=prices)
            ledger.start()
            for name, share, close in (("free", 0.0, lambda m: m.finish(Usage(1_000, 100))),
                                       ("half", 0.5, lambda m: m.finish(Usage(1_000, 100))),
                                       ("cut", 0.0, lambda m: (m.sent([Choice(0, "x y")]), m.left()))):
                meter = ledger.meter(request_id=name, account_id="acct", key_id="key_1")
                meter.from_cache(attempt, share)
                close(meter)
            await ledger.close()
        finally:
            await engine.dispose()

    with empty_database("sqlite") as url:
        asyncio.run(meter_requests(url))
        rows = {row["request_id"]: row for row in ledger_rows(url, "acct")}
    full = (1_000 * 2 + 100 * 10) * 1000  # nano-dollars at the model's price
    assert [(rows[n]["outcome"], rows[n]["total_tokens"], rows[n]["cost_nanos"], rows[n]["saved_nanos"])
            for n in ("free", "half", "cut")] == [("cache_hit", 1_100, 0, full), ("cache_hit", 1_100, full // 2, full // 2),
                                                  ("client_disconnected", 0, 0, None)]
