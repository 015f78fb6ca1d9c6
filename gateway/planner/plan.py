"""The one planner: a request's vendor calls, made by its endpoint's unit (endpoints/<name>/plan.py
builds its `Call` and judges its parameters), fanned out here, run, verified, and their answers
merged back into one, whole or streamed, for every endpoint alike.

What one vendor call cannot take is fanned out (`fan_out`): a list of prompts beyond what the
vendor takes per call (`prompt`'s per-call record; a chat call has one conversation), and `n`
beyond its choices per call (`n`'s; emulated: one call per choice), each leg sampling choice i
with seed + i, at most `max_vendor_calls` legs (a 400 beyond). The legs run concurrently (at most
FANOUT_CONCURRENCY at once) and their choices are merged with OpenAI's prompt-major indexing,
`index = prompt_index * n + i`; the usage the client is told counts each prompt once (OpenAI's
semantics), what the ledger bills every call's. Each leg's answer is held to what it asked
(planner/verify.py) before the client sees it, and the endpoint's emulations (planner/emulation.py:
echo, stop, best_of for completions) are applied to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import jsonschema_rs

from gateway.core import observe
from gateway.core.completion import Attempt, Call, Chunk, Result, Usage, choice_seed, summed_usage, usage_per_prompt
from gateway.core.errors import BadRequest
from gateway.core.streams import all_of, merged
from gateway.planner.emulation import NONE, Emulation
from gateway.planner.verify import Expected
from gateway.vendors.base import Adapter, Translator

FANOUT_CONCURRENCY = 16  # vendor calls in flight for one request


@dataclass(slots=True)
class Leg:
    """One vendor call of a plan, and where its choices land in the client's answer."""

    call: Any  # the endpoint's Call (core/completion.py)
    first_prompt: int
    first_choice: int  # offset within n

    def index(self, local: int, per_prompt: int) -> int:
        prompt, i = divmod(local, self.call.n)
        return (self.first_prompt + prompt) * per_prompt + self.first_choice + i


@dataclass(slots=True)
class Plan:
    adapter: Adapter
    translator: Translator[Any]  # the adapter's for the endpoint
    model: str  # as the client wrote it: "vendor/name"
    prompts: list[str]  # the request's prompts (a chat's conversation as text): echo, estimates
    n: int  # choices per prompt the client asked for
    legs: list[Leg]
    stream: bool
    include_usage: bool
    user: str | None  # the request's end user, whether or not the vendor is sent it
    emulation: Emulation = NONE
    echo: bool = False  # the choices start with their prompts (completions' echo)
    # What every call's answer must match (a strict json_schema), compiled once for all of them.
    answer_schema: jsonschema_rs.Validator | None = None
    _attempt: Attempt | None = field(default=None, init=False, repr=False)  # (made once: `attempt`)

    @property
    def vendor_calls(self) -> int:
        return len(self.legs)

    @property
    def choices(self) -> int:
        """The client's answer's choices: `n` per prompt."""
        return len(self.prompts) * self.n

    def echoed(self, index: int) -> str:
        """The prompt choice `index` starts with (nothing without echo): not part of its completion."""
        return self.prompts[index // self.n] if self.echo else ""

    @property
    def per_prompt(self) -> int:
        """Choices generated per prompt (best_of candidates when the gateway ranks them)."""
        return self.emulation.per_prompt(self.n)

    def usage_totals(self, usages: list[Usage | None]) -> tuple[Usage | None, Usage | None]:
        """The usage of the legs (one entry per leg): what the client is told, each prompt once
        however many legs share it (OpenAI's semantics), and what the vendor calls billed, every
        leg's prompt included."""
        by_prompts: dict[int, list[Usage | None]] = {}
        for leg, usage in zip(self.legs, usages, strict=True):
            by_prompts.setdefault(leg.first_prompt, []).append(usage)
        return usage_per_prompt(by_prompts.values()), summed_usage(usages)

    def expected(self, call: Call) -> Expected:
        return Expected(call, self.adapter.name, self.answer_schema)

    async def complete(self) -> Result:
        return await complete(self)

    def chunks(self) -> AsyncIterator[list[Chunk]]:
        return stream(self)

    def attempt(self) -> Attempt:
        """What the usage ledger records of this plan's vendor calls (the limits' demand reads it too)."""
        if self._attempt is not None:
            return self._attempt
        first = self.legs[0].call
        model = first.model
        # base.CountsTokens, read as an attribute: isinstance() of a runtime protocol inspects the
        # class on every call, on every request.
        count_tokens = getattr(self.adapter, "count_tokens", None)
        own = (lambda text: count_tokens(model, text)) if count_tokens is not None else None
        most = [leg.call.most_tokens() for leg in self.legs]
        attempt = self._attempt = Attempt(
            vendor=self.adapter.name, model=self.model, streamed=self.stream, end_user=self.user,
            prompts_sent=tuple(prompt for leg in self.legs for prompt in leg.call.prompts),
            max_completion_tokens=None if None in most else sum(most),  # type: ignore[arg-type]
            vendor_calls=len(self.legs), count_tokens=own, served_by=first.served_by, endpoint=first.endpoint)
        return attempt


def fan_out(adapter: Adapter, translator: Translator[Any], call: Call, n: int, max_calls: int | None) -> list[Leg]:
    """The legs that serve `call` for `n` choices per prompt: as few as what the vendor takes per
    call allows, at most `max_calls` (settings; None: no bound), the calls of one plan sharing one
    `served_by` list."""
    caps = translator.capabilities
    prompts = call.prompts
    per_call = (caps.per_call("prompt") or len(prompts)) if len(prompts) > 1 else 1
    n_per_call = caps.per_call("n") or n
    calls = -(-max(len(prompts), 1) // per_call) * -(-n // n_per_call)
    if max_calls is not None and calls > max_calls:
        # Concurrency is bounded too (FANOUT_CONCURRENCY), but a request must not turn into an
        # unbounded number of billed vendor calls.
        raise BadRequest(
            f"vendor '{adapter.name}' takes {per_call} prompt(s) and {n_per_call} choice(s) per call: this request "
            f"would need {calls} vendor calls, more than the gateway's limit of {max_calls}",
            code="too_many_vendor_calls",
            param="prompt" if len(prompts) > 1 else "n",
            vendor=adapter.name,
        )
    if calls == 1:
        return [Leg(call, 0, 0)]  # the usual case: the call as it is (the seed of choice 0 is the seed)
    seed = call.given("seed")
    legs = []
    for first_prompt in range(0, max(len(prompts), 1), per_call):
        for first_choice in range(0, n, n_per_call):
            leg_call = call.split(prompts[first_prompt: first_prompt + per_call], min(n_per_call, n - first_choice),
                                  choice_seed(seed, first_choice))
            legs.append(Leg(leg_call, first_prompt, first_choice))
    return legs


async def complete(plan: Plan) -> Result:
    """Run every leg (bounded concurrency) and merge the answers in the client's index order."""
    legs = plan.legs
    if len(legs) == 1:
        results = [await _vendor_complete(plan, legs[0])]
    else:
        gate = asyncio.Semaphore(FANOUT_CONCURRENCY)

        async def run(leg: Leg) -> Result:
            async with gate:
                return await _vendor_complete(plan, leg)

        # The first leg's failure is the request's answer (e.g. a 400 for one bad prompt of a list);
        # the others are abandoned, which their deployments' health is told (core/streams.py).
        results = await all_of([run(leg) for leg in legs])
    choices = []
    for leg, result in zip(legs, results, strict=True):
        for choice in result.choices:
            choice.index = leg.index(choice.index, plan.per_prompt)
            choices.append(choice)
    choices.sort(key=lambda c: c.index)
    client, billed = plan.usage_totals([r.usage for r in results])
    merged = Result(choices=choices, usage=client, system_fingerprint=results[0].system_fingerprint, billed=billed)
    if plan.emulation.rewrites_result:
        return plan.emulation.complete(merged, plan.prompts, plan.n, plan.adapter.name)
    return merged


async def stream(plan: Plan) -> AsyncIterator[list[Chunk]]:
    """Chunks of every leg as they come, in lists as each leg's vendor reads deliver them (at
    most FANOUT_CONCURRENCY legs at once), re-indexed, then one final chunk with the usage totals
    (Plan.usage_totals; None when some leg did not report its usage). A single leg, the usual
    case, is relayed without a task or a queue between the vendor and the client."""
    legs = plan.legs
    usages: list[Usage | None] = [None] * len(legs)
    expected = [plan.expected(leg.call) for leg in legs]
    # Who shows each leg's own chunks to its Expected: the emulations, when they rewrite them.
    checked_here = not plan.emulation.rewrites_stream
    if len(legs) == 1:
        only = expected[0]
        async with aclosing(_vendor_stream(plan, legs[0], only)) as chunks:
            async for batch in chunks:
                if checked_here:
                    only.batch(batch)
                if relayed := _relayed(plan, 0, batch, usages):
                    yield relayed
        if checked_here:
            only.ended()
    else:
        gate = asyncio.Semaphore(FANOUT_CONCURRENCY)

        async def leg_chunks(number: int) -> AsyncIterator[list[Chunk]]:
            leg = expected[number]
            async with gate, aclosing(_vendor_stream(plan, legs[number], leg)) as chunks:
                async for batch in chunks:
                    if checked_here:
                        leg.batch(batch)
                    yield batch
            if checked_here:
                leg.ended()

        streams = [leg_chunks(number) for number in range(len(legs))]
        async with aclosing(merged(streams, buffered=64)) as batches:  # a slow client slows the legs down
            async for number, batch in batches:
                if relayed := _relayed(plan, number, batch, usages):
                    yield relayed
    client, billed = plan.usage_totals(usages)
    yield [Chunk([], client, billed)]


def _relayed(plan: Plan, number: int, batch: list[Chunk], usages: list[Usage | None]) -> list[Chunk]:
    """What of leg `number`'s chunks goes on: those with choices, indexed for the client; its
    usage is kept in `usages` for the final chunk."""
    leg = plan.legs[number]
    per_prompt = plan.per_prompt
    same_indexes = leg.first_prompt == 0 and leg.first_choice == 0 and leg.call.n == per_prompt
    relayed = []
    for chunk in batch:
        if chunk.usage is not None:
            usages[number] = chunk.usage
        if chunk.choices:
            if not same_indexes:
                for choice in chunk.choices:
                    choice.index = leg.index(choice.index, per_prompt)
            relayed.append(chunk if chunk.usage is None and chunk.billed is None else Chunk(chunk.choices))
    return relayed


async def _vendor_complete(plan: Plan, leg: Leg) -> Result:
    span = observe.current().vendor_call(plan.adapter.name, leg.call)
    try:
        with span.current():
            result = await plan.translator.complete(leg.call)
        span.result(result)
        return plan.expected(leg.call).result(result)
    except BaseException as exc:
        span.failed(exc)
        raise
    finally:
        span.end()


def _vendor_stream(plan: Plan, leg: Leg, expected: Expected) -> AsyncIterator[list[Chunk]]:
    """One leg's chunks; `expected` sees them as the vendor sent them (here when the emulations
    rewrite them, else as they are relayed: `_relayed`)."""
    span = observe.current().vendor_call(plan.adapter.name, leg.call)
    chunks = observe.observed_stream(span, plan.translator.stream(leg.call))
    if plan.emulation.rewrites_stream:
        return plan.emulation.stream(chunks, leg.call.prompts, leg.call.n, expected)
    return chunks
