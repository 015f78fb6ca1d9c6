"""A request's meter: how one completion request becomes one ledger row.

A handler opens a `Meter` per request (`Ledger.meter`), names the vendor calls it makes
(`trying`, with the planner's `Attempt`), tells it what text went to the client, and closes it
with the vendor's usage (`finish`), with what went wrong (`fail`) or because the client left
(`left`). Without usage from the vendor the meter estimates it: every prompt sent plus the text
delivered so far (or, when none was, what an adapter reported as generated), counted with a
tokenizer (store/tokens.py) in a worker thread, never more than could have been read or generated,
and the row says `estimated`. The handler asks the meter for the client's estimate too
(`estimated_usage`: each prompt once, as OpenAI counts), counted the same way and bounded the same
way. A request the vendor refused as the client's own mistake (a 4xx) is `rejected` and bills
nothing; so does a request that failed (the vendor's fault, or the gateway's) before any of its
text reached the client: whatever a vendor did for it, the client got nothing. Every row is priced
as it is written (store/prices.py), at the price in force when the request started.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from gateway.core.completion import COUNT_TOKENS_TIMEOUT, Attempt, Choice, Usage, rough_tokens
from gateway.core.endpoint import Endpoint
from gateway.core.errors import ClientDisconnected, GatewayError, VendorTimeout
from gateway.store import tokens
from gateway.store.prices import Prices

log = logging.getLogger("gateway.ledger")

# Counting an estimate's tokens is bounded work (store/tokens.py), but the local model's tokenizer
# is a service that may stall: past this many seconds, the estimate is made from length. Twice the
# time one tokenizer call may take, which then gives up and frees its worker thread.
ESTIMATE_TIMEOUT = 2 * COUNT_TOKENS_TIMEOUT


class Sink(Protocol):
    """Where a meter's row goes (the Ledger)."""

    ESTIMATE_TIMEOUT: float  # the bound of counting an estimate, the row's and the client's alike

    def add(self, row: dict[str, Any]) -> None: ...

    def estimate(self, row: dict[str, Any], estimate: Estimate) -> asyncio.Task[dict[str, Any]]:
        """The row, once its tokens are counted: the task counting them, whose result it is."""


# What became of a request.
COMPLETED = "completed"  # the vendor finished its answer
CLIENT_DISCONNECTED = "client_disconnected"  # the client left mid-stream
VENDOR_ERROR = "vendor_error"  # the vendor failed, broke off or refused for its own reasons (a 429, its credentials)
REJECTED = "rejected"  # the vendor refused the request as the client's mistake (a 4xx): nothing billed
TIMEOUT = "timeout"  # the vendor did not answer in time
GATEWAY_ERROR = "gateway_error"  # a fault of the gateway itself
REFUSED = "refused"  # a limit refused it before any vendor call (no tokens)
CACHE_HIT = "cache_hit"  # answered from the response cache (http/cache.py): no vendor call, the entry's tokens


async def counted(estimate: Estimate, timeout: float, what: str) -> tuple[int, int]:
    """The estimate's (prompt, completion) tokens, counted in a worker thread (a long text keeps a
    pure-Python tokenizer busy for a while, which must not be the event loop's while); after
    `timeout` seconds, or if counting fails, from the texts' length (four characters a token)."""
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.to_thread(estimate.tokens)
    except Exception as exc:
        log.warning("counting tokens for %s failed (%s); estimated at four characters a token", what,
                    f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        return estimate.rough()
OUTCOMES = (COMPLETED, CLIENT_DISCONNECTED, VENDOR_ERROR, REJECTED, TIMEOUT, GATEWAY_ERROR, REFUSED, CACHE_HIT)
# Failures that are not the client's doing: billed only for text the client received.
NOT_THE_CLIENTS = frozenset({VENDOR_ERROR, TIMEOUT, GATEWAY_ERROR})


def outcome_of(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError | GeneratorExit | ClientDisconnected):
        return CLIENT_DISCONNECTED
    if isinstance(exc, VendorTimeout):
        return TIMEOUT
    if isinstance(exc, GatewayError) and exc.vendor:
        return REJECTED if exc.clients_mistake else VENDOR_ERROR
    return GATEWAY_ERROR


def _unpriced(prompt_tokens: int, completion_tokens: int) -> int | None:
    return None


@dataclass(slots=True)
class Estimate:
    count: Callable[[str], int]  # one text's tokens (store/tokens.py); `tokens()` bounds the work of all
    prompts: list[str]  # each prompt as often as it was sent to the vendor
    sent: list[str]  # the text delivered per choice
    max_completion: int | None  # the most the vendor calls could have generated
    cost: Callable[[int, int], int | None] = _unpriced  # the row's price for (prompt, completion) tokens

    def tokens(self) -> tuple[int, int]:
        return self._bounded(tokens.counts(self.count, [*self.prompts, *self.sent]))

    def rough(self) -> tuple[int, int]:
        """The estimate of last resort, when counting did not finish in time."""
        return self._bounded([rough_tokens(len(text)) for text in [*self.prompts, *self.sent]])

    def _bounded(self, counted: list[int]) -> tuple[int, int]:
        # A token covers at least one byte, and a completion no more than was asked for: an
        # estimate never bills more than could have been read or generated.
        texts = [*self.prompts, *self.sent]
        bounded = [min(count, len(text.encode())) for count, text in zip(counted, texts, strict=True)]
        prompt, completion = sum(bounded[:len(self.prompts)]), sum(bounded[len(self.prompts):])
        if self.max_completion is not None:
            completion = min(completion, self.max_completion)
        return prompt, completion


# What closing a meter gives back: the row as written, NO_ROW when no vendor was called (nothing is
# written), the task still counting an estimated row's tokens (its result: the row), or None when
# the meter was closed already (nothing more to settle).
Closed = dict[str, Any] | asyncio.Task[dict[str, Any]] | None
NO_ROW: dict[str, Any] = {}


class Meter:
    """One request's way into the ledger, opened as the request starts. The handler names each
    vendor call it makes (`trying`), reports the text sent, and closes the meter exactly once:
    `finish` with the vendor's usage, `fail` with what went wrong, or `left` when the client went
    away. A request that never reached a vendor records nothing, unless a limit refused it
    (`refused`). Closing gives back what was written (`Closed`): whoever closes it settles what
    depends on the row (the request's lifecycle settles its limits with it)."""

    __slots__ = ("_ledger", "_prices", "_attempt", "_requested", "_row", "_clock", "_first_text", "_sent",
                 "_generated", "_closed", "_counts", "_hit_price")

    def __init__(self, ledger_: Sink, request_id: str, account_id: str, key_id: str, prices: Prices) -> None:
        self._ledger = ledger_
        self._prices = prices
        self._attempt: Attempt | None = None
        self._requested: str | None = None  # the first model tried is the one the client asked for
        self._clock = time.monotonic()
        self._first_text: float | None = None
        self._sent: dict[int, list[str]] = {}
        self._generated: dict[int, list[str]] = {}  # by candidate, before any of it was sent
        self._closed = False
        # Token counts of texts already counted for this request: the client's estimate and the
        # row's count the same prompts (and the row a fanned-out prompt once per call).
        self._counts: dict[str, int] = {}
        self._hit_price: float | None = None  # a cache hit's share of the price (None: not a hit)
        self._row: dict[str, Any] = {
            "request_id": request_id,
            "account_id": account_id,
            "key_id": key_id,
            "started_at": datetime.now(UTC),
        }

    @property
    def row(self) -> dict[str, Any]:
        """What the meter knows so far: the request's ids, and once closed its whole row (the
        token counts of an estimate arrive later, in the ledger)."""
        return self._row

    def trying(self, attempt: Attempt) -> None:
        """Vendor calls are made for `attempt` (a fallback replaces the model tried before it)."""
        self._attempt = attempt
        self._generated = {}  # what an earlier attempt generated is not this one's
        if self._requested is None:
            self._requested = attempt.model

    def from_cache(self, attempt: Attempt, price_share: float) -> None:
        """The request is answered from the response cache, as `attempt` would have been: its row
        is a `cache_hit` with the entry's tokens, priced at `price_share` of the model's price
        (0: free), and a hit that does not complete bills nothing (no vendor was called)."""
        self.trying(attempt)
        self._hit_price = price_share

    def sent(self, choices: Iterable[Choice]) -> None:
        """Text went to the client: the first time is the time to first token, and all of it is
        what an estimate counts if the vendor's usage never comes."""
        for choice in choices:
            if choice.text:
                if self._first_text is None:
                    self._first_text = time.monotonic()
                self._sent.setdefault(choice.index, []).append(choice.text)

    def generated(self, candidate: int, text: str) -> None:
        """Text was generated for the answer but not yet sent (reported through the call's
        clearance, core/clearance.py): what an estimate counts when nothing was sent because the
        client left first."""
        self._generated.setdefault(candidate, []).append(text)

    async def estimated_usage(self, prompts: Sequence[str], echoed: Callable[[int], str],
                              answer: Iterable[Choice] | None = None) -> Usage:
        """The usage a client is told when the vendor reported none (OpenAI's semantics): each
        prompt once, and every choice's text (of `answer`, a plain answer about to be sent, else
        sent so far) less the prompt `echoed(index)` it starts with. Counted as the row's estimate
        is (`counted`), marked estimated."""
        texts = []
        sent = self._sent.items() if answer is None else ((choice.index, (choice.text,)) for choice in answer)
        for index, pieces in sent:
            text, prefix = "".join(pieces), echoed(index)
            texts.append(text[len(prefix):] if prefix and text.startswith(prefix) else text)
        prompt, completion = await counted(self._estimate(list(prompts), texts), self._ledger.ESTIMATE_TIMEOUT,
                                           f"the answer to {self._row['request_id']}")
        return Usage(prompt, completion, estimated=True)

    def finish(self, usage: Usage | None, choices: Iterable[Choice] = ()) -> Closed:
        """The request completed; `choices` is a plain (non-stream) answer's text."""
        self.sent(choices)
        return self._close(COMPLETED, usage)

    def fail(self, exc: BaseException) -> Closed:
        outcome = outcome_of(exc)
        if outcome == REJECTED and self._sent:
            outcome = VENDOR_ERROR  # text reached the client: the vendor answered (and billed) before it refused
        return self._close(outcome, None)

    def left(self) -> Closed:
        """The client went away (or the response ended before the stream did)."""
        return self._close(CLIENT_DISCONNECTED, None)

    def refused(self, model: str, streamed: bool, end_user: str | None, endpoint: Endpoint) -> None:
        """A limit refused the request before any vendor call: its row says so, with no tokens."""
        if self._closed:
            return
        self._closed = True
        self._ledger.refuse(self._row | {
            "vendor": model.partition("/")[0], "model": model, "fallback_from": None, "streamed": streamed,
            "end_user": end_user, "outcome": REFUSED, "ended_at": datetime.now(UTC), "ttft_ms": None,
            "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "cached_tokens": None,
            "reasoning_tokens": None, "estimated": False, "cost_nanos": 0, "endpoint": endpoint})

    def _close(self, outcome: str, usage: Usage | None) -> Closed:
        if self._closed:
            return None
        self._closed = True
        attempt = self._attempt
        if attempt is None:
            return NO_ROW
        row = self._row
        row |= {
            "vendor": attempt.vendor,
            "model": attempt.model,
            "fallback_from": self._requested if self._requested != attempt.model else None,
            # Fanned-out calls may be served by several deployments: each named once, in order.
            "deployment": ",".join(dict.fromkeys(attempt.served_by)) or None,
            "streamed": attempt.streamed,
            "end_user": attempt.end_user,
            "endpoint": attempt.endpoint,  # a StrEnum: the column holds its word
            "outcome": outcome,
            "ended_at": datetime.now(UTC),
            "ttft_ms": None if self._first_text is None else round((self._first_text - self._clock) * 1000, 3),
        }
        hit_price = self._hit_price
        if hit_price is not None and outcome == COMPLETED:
            row["outcome"] = CACHE_HIT
        if outcome == REJECTED or (outcome in NOT_THE_CLIENTS and not self._sent) or (
                hit_price is not None and (outcome != COMPLETED or usage is None)):  # nothing for the client
            row |= {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "cached_tokens": None,
                    "reasoning_tokens": None, "estimated": False, "cost_nanos": 0}
            self._ledger.add(row)
            return row
        model, started, calls, prices = attempt.model, row["started_at"], attempt.vendor_calls, self._prices
        if usage is not None:
            cached = _detail(usage.prompt_tokens_details, "cached_tokens")
            row |= {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
                "cached_tokens": cached,
                "reasoning_tokens": _detail(usage.completion_tokens_details, "reasoning_tokens"),
                "estimated": usage.estimated,
                "cost_nanos": prices.cost_nanos(
                    model, usage.prompt_tokens, usage.completion_tokens, cached, started, vendor_calls=calls,
                    cache_write_tokens=_detail(usage.prompt_tokens_details, "cache_creation_tokens")),
            }
            if hit_price is not None:  # what the vendor would have cost, less what the hit costs
                full = row["cost_nanos"]
                row["cost_nanos"] = 0 if full is None or not hit_price else round(full * hit_price)
                row["saved_nanos"] = None if full is None else full - row["cost_nanos"]
            self._ledger.add(row)
            return row
        sent = (self._sent or self._generated).values()
        estimate = self._estimate(list(attempt.prompts_sent), ["".join(pieces) for pieces in sent],
                                  cost=lambda prompt, completion: prices.cost_nanos(model, prompt, completion, 0,
                                                                                    started, vendor_calls=calls))
        row |= {"cached_tokens": None, "reasoning_tokens": None, "estimated": True}
        return self._ledger.estimate(row, estimate)

    def _estimate(self, prompts: list[str], sent: list[str],
                  cost: Callable[[int, int], int | None] | None = None) -> Estimate:
        attempt = self._attempt
        assert attempt is not None
        count = tokens.counter(attempt.model, attempt.count_tokens)
        counts = self._counts

        def cached(text: str) -> int:  # from worker threads: a dict's get and set are atomic
            found = counts.get(text)
            if found is None:
                found = counts[text] = count(text)
            return found

        return Estimate(count=cached, prompts=prompts, sent=sent, max_completion=attempt.max_completion_tokens,
                        cost=cost or _unpriced)


def _detail(details: dict[str, Any] | None, name: str) -> int | None:
    value = (details or {}).get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
