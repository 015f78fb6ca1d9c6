"""Limits as a request meets them (gateway/limits/on_request.py).

Its check (`Check`) when the verdict comes from a shared store and is awaited late, by the vendor
layer: a refusal is Withheld (not a vendor's failure) and answers every later ask the same way,
with one ledger row; a client that leaves while the answer is on its way never loses a claim the
store granted. The store here is a stand-in whose answer the test releases.

The x-ratelimit-* headers of a grant: per kind, the tightest per-minute window of the key's and the
account's (the fewest remaining, then the lowest limit), in OpenAI's names and formats; none
without a per-minute limit."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.endpoint import Endpoint
from gateway.core.clearance import Withheld
from gateway.core.errors import ClientDisconnected, RateLimited
from gateway.endpoints.completions.unit import UNIT
from gateway.limits import on_request
from gateway.limits.counters import RPM, TPM, Claim, Refusal, window
from gateway.limits.on_request import duration, headers
from gateway.limits.rules import ACCOUNT, KEY, Limits, Subject
from gateway.limits.verdicts import Grant
from generated.models import CompletionRequest

SUBJECT = Subject(KEY, "key_a")
LIMITS = Limits(rpm=3, concurrent=1)
DEMAND = UNIT.demand(CompletionRequest.model_validate({"model": "fake/m", "prompt": "x"}), None, False)


class Store:
    """What a limiter's settlements reach (Grant.settle calls `settle`)."""

    def __init__(self) -> None:
        self.settled: list[tuple[Claim, int, dict]] = []

    def settle(self, claim: Claim, tokens: int, spent: dict) -> None:
        self.settled.append((claim, tokens, spent))


class Asking:
    """A verdict on its way from a shared store: `grant()` waits until the test lets it answer."""

    remote = True
    limiter = None

    def __init__(self, answer: Grant) -> None:
        self.subjects = ((SUBJECT, LIMITS),)
        self.answer = answer
        self.asked = asyncio.Event()
        self.answered = asyncio.Event()

    async def grant(self) -> Grant:
        self.asked.set()
        await self.answered.wait()
        return self.answer


class Meter:
    def __init__(self) -> None:
        self.refusals = 0
        self.on_close = None

    def refused(self, model: str, streamed: bool, end_user: str | None, endpoint: Endpoint = Endpoint.COMPLETIONS) -> None:
        self.refusals += 1


def test_a_client_that_leaves_while_the_verdict_is_on_its_way_gives_back_what_was_granted():
    async def scenario():
        store = Store()
        claim = Claim("cmpl-1", 20, [])
        asking = Asking(Grant(store, claim, subjects=((SUBJECT, LIMITS),)))  # type: ignore[arg-type]
        meter = Meter()
        check = on_request.Check(asking, "key_a", DEMAND, meter)  # type: ignore[arg-type]
        assert check.remote and check.subjects == ((SUBJECT, LIMITS),)
        check.defer()
        waiting = asyncio.create_task(check.go_ahead())  # the vendor layer, about to send
        await asking.asked.wait()
        waiting.cancel()  # the client left: the request's work is cancelled where it waits
        with pytest.raises(asyncio.CancelledError):
            await waiting
        left = ClientDisconnected()
        assert await check.failed(left) == (on_request.NO_LIMITS, left)  # nothing waits for the store
        assert store.settled == []
        asking.answered.set()  # the store's answer comes after all: the claim it took is given back
        await asyncio.gather(*(asyncio.all_tasks() - {asyncio.current_task()}))  # the verdict's own task
        await asyncio.sleep(0)  # (a yield: its done-callbacks run)
        assert store.settled == [(claim, 0, {})] and meter.on_close is None

    asyncio.run(scenario())


def refused_and_deferred() -> tuple[on_request.Check, Meter]:
    """A check whose verdict, an rpm refusal, is read in a task of its own (`defer`), and its meter."""
    asking = Asking(Grant(refusal=Refusal(SUBJECT, RPM, 3, retry_after=20.0, wanted=1), subjects=((SUBJECT, LIMITS),)))
    asking.answered.set()
    meter = Meter()
    check = on_request.Check(asking, "key_a", DEMAND, meter)  # type: ignore[arg-type]
    check.defer()
    return check, meter


def test_a_refusal_awaited_by_the_vendor_layer_is_withheld_and_answers_every_later_ask():
    async def scenario():
        check, meter = refused_and_deferred()
        with pytest.raises(Withheld) as withheld:
            await check.go_ahead()
        error = withheld.value.error
        assert isinstance(error, RateLimited) and error.code == "requests_per_minute" and error.retry_after == 20
        assert not isinstance(withheld.value, Exception)  # no `except Exception` on the way takes it for a failure
        with pytest.raises(RateLimited) as again:
            await check.grant()
        assert again.value is error
        # The handler's answer to the Withheld: the refusal itself, and one ledger row in all.
        assert await check.failed(withheld.value) == (on_request.NO_LIMITS, error)
        assert meter.refusals == 1

    asyncio.run(scenario())


def test_a_failure_before_the_vendor_layer_awaited_the_verdict_is_answered_by_a_refusal():
    async def scenario():
        check, meter = refused_and_deferred()
        mistake = ValueError("the adapter refused the request before sending it")
        grant, answer = await check.failed(mistake)
        assert grant is on_request.NO_LIMITS and isinstance(answer, RateLimited) and meter.refusals == 1

    asyncio.run(scenario())


# -- the x-ratelimit-* headers -----------------------------------------------------------------------
ACCT = Subject(ACCOUNT, "acct")


def test_each_kind_tells_its_tightest_window():
    grant = Grant(windows={(SUBJECT, RPM): window(100, 90.0), (SUBJECT, TPM): window(1000, 400.0),
                           (ACCT, RPM): window(50, 10.0), (ACCT, TPM): window(5000, 4000.0)})
    assert headers(grant) == {
        "x-ratelimit-limit-requests": "50", "x-ratelimit-remaining-requests": "10",
        "x-ratelimit-reset-requests": duration(window(50, 10.0).reset),
        "x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "400",
        "x-ratelimit-reset-tokens": duration(window(1000, 400.0).reset),
    }
    assert headers(grant)["x-ratelimit-reset-requests"] == "48s"  # 40 of 50 to refill at 50 a minute


def test_equal_remaining_tells_the_lower_limit_and_a_kind_without_a_window_is_left_out():
    grant = Grant(windows={(SUBJECT, RPM): window(100, 5.0), (ACCT, RPM): window(20, 5.0)})
    assert headers(grant) == {"x-ratelimit-limit-requests": "20", "x-ratelimit-remaining-requests": "5",
                              "x-ratelimit-reset-requests": "45s"}
    assert headers(Grant()) == {}
