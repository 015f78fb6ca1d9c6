"""From a validated request to vendor calls, and their answers back into one completion.

The planner reads the adapter's `Capabilities` before any vendor call (planner/capabilities.py):
each parameter a request uses is passed through (native), emulated by the gateway, or rejected
with a 400 naming it and the vendor. List prompts and `n` beyond what one vendor call takes are
emulated by concurrent fan-out; the answers are merged with OpenAI's prompt-major indexing,
`index = prompt_index * n + i`. The other emulations (echo, stop, best_of) are applied to each
vendor call's answer by planner/emulation.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from pydantic import MISSING

from gateway.core import observe
from gateway.core.clearance import CLEAR, Clearance
from gateway.core.endpoint import Endpoint
from gateway.core.completion import (
    DEFAULT_MAX_TOKENS,
    Attempt,
    Chunk,
    CompletionCall,
    Result,
    Usage,
    choice_seed,
    summed_usage,
    usage_per_prompt,
)
from gateway.core.errors import BadRequest, invalid_field
from gateway.core.parameters import PARAMETERS
from gateway.core.streams import all_of, merged
from gateway.planner import capabilities
from gateway.planner.emulation import Emulation
from gateway.planner.verify import Expected
from gateway.vendors.base import Adapter, Translator
from gateway.vendors.registry import Registry
from generated.models import CompletionRequest

FANOUT_CONCURRENCY = 16  # vendor calls in flight for one request


@dataclass(slots=True)
class Leg:
    """One vendor call of a plan, and where its choices land in the client's answer."""

    call: CompletionCall
    first_prompt: int
    first_choice: int  # offset within n

    def index(self, local: int, per_prompt: int) -> int:
        prompt, i = divmod(local, self.call.n)
        return (self.first_prompt + prompt) * per_prompt + self.first_choice + i


@dataclass(slots=True)
class Plan:
    adapter: Adapter
    translator: Translator[CompletionCall]  # the adapter's for completions
    model: str  # as the client wrote it: "vendor/name"
    prompts: list[str]
    n: int
    legs: list[Leg]
    stream: bool
    include_usage: bool
    emulation: Emulation
    user: str | None  # the request's end user, whether or not the vendor is sent it
    echo: bool = False

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

    async def complete(self) -> Result:
        return await complete(self)

    def chunks(self) -> AsyncIterator[list[Chunk]]:
        return stream(self)

    def attempt(self) -> Attempt:
        """What the usage ledger records of this plan's vendor calls."""
        model = self.legs[0].call.model
        # base.CountsTokens, read as an attribute: isinstance() of a runtime protocol inspects the
        # class on every call, on every request.
        count_tokens = getattr(self.adapter, "count_tokens", None)
        own = (lambda text: count_tokens(model, text)) if count_tokens is not None else None
        adapter = self.adapter
        return Attempt(vendor=adapter.name, model=self.model, streamed=self.stream, end_user=self.user,
                       prompts_sent=tuple(prompt for leg in self.legs for prompt in leg.call.prompts),
                       max_completion_tokens=sum(leg.call.max_tokens * (leg.call.best_of or leg.call.n)
                                                 * len(leg.call.prompts) for leg in self.legs),
                       vendor_calls=len(self.legs), count_tokens=own, served_by=self.legs[0].call.served_by)


def plan(request: CompletionRequest, registry: Registry, max_vendor_calls: int,
         clearance: Clearance = CLEAR) -> Plan:
    """The vendor calls that serve `request`, each awaiting the request's `clearance`; at most
    `max_vendor_calls` of them (settings)."""
    vendor, _, model = request.model.partition("/")
    adapter = registry.serving(vendor, model, Endpoint.COMPLETIONS)
    translator = adapter.translators[Endpoint.COMPLETIONS]
    call = completion_call(request, model)
    call.clearance = clearance
    if call.best_of is not None and call.best_of < call.n:
        raise invalid_field(("best_of",), f"best_of ({call.best_of}) must be at least n ({call.n})", "value_error",
                            call.best_of)
    if call.best_of == call.n or call.max_tokens == 0:
        call.best_of = None  # as many candidates as choices, or nothing generated: nothing to rank
    emulation = capabilities.check(adapter, translator, call)
    options = _value(request.stream_options)
    legs = _fan_out(adapter, translator, emulation.vendor_call(call), max_vendor_calls)
    for leg in legs:
        leg.call.served_by = call.served_by  # one record of the deployments that served the plan
    return Plan(
        adapter=adapter,
        translator=translator,
        model=request.model,
        prompts=call.prompts,
        n=call.n,
        legs=legs,
        stream=call.stream,
        include_usage=bool(options and _value(options.include_usage)),
        emulation=emulation,
        user=call.user,
        echo=call.echo,
    )


def completion_call(request: CompletionRequest, model: str) -> CompletionCall:
    """The request's parameters as one vendor-neutral call, defaults applied. Every parameter of
    the contract is carried over (a new one the call has no field for fails here, loudly)."""
    values: dict[str, Any] = {name: _value(getattr(request, name)) for name in PARAMETERS if name != "prompt"}
    prompt = request.prompt
    values |= {
        "prompts": [prompt] if isinstance(prompt, str) else list(prompt.root),
        "max_tokens": _value(request.max_tokens, DEFAULT_MAX_TOKENS),
        "n": _value(request.n, 1),
        "echo": bool(_value(request.echo)),
        "stop": _stop(request.stop),
        "logit_bias": _value(request.logit_bias) or None,
    }
    return CompletionCall(model=model, stream=bool(_value(request.stream)), **values)


def _fan_out(adapter: Adapter, translator: Translator[CompletionCall], call: CompletionCall,
             max_calls: int) -> list[Leg]:
    caps = translator.capabilities
    per_call = caps.per_call("prompt") or len(call.prompts)
    n_per_call = caps.per_call("n") or call.n
    calls = -(-len(call.prompts) // per_call) * -(-call.n // n_per_call)
    if calls > max_calls:
        # Concurrency is bounded too (FANOUT_CONCURRENCY), but a request must not turn into an
        # unbounded number of billed vendor calls.
        raise BadRequest(
            f"vendor '{adapter.name}' takes {per_call} prompt(s) and {n_per_call} choice(s) per call: this request "
            f"would need {calls} vendor calls, more than the gateway's limit of {max_calls}",
            code="too_many_vendor_calls",
            param="prompt" if len(call.prompts) > 1 else "n",
            vendor=adapter.name,
        )
    if calls == 1:
        return [Leg(call, 0, 0)]  # the usual case: the call as it is (the seed of choice 0 is the seed)
    legs = []
    for first_prompt in range(0, len(call.prompts), per_call):
        for first_choice in range(0, call.n, n_per_call):
            leg_call = dataclasses.replace(
                call,
                prompts=call.prompts[first_prompt : first_prompt + per_call],
                n=min(n_per_call, call.n - first_choice),
                seed=choice_seed(call.seed, first_choice),
            )
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
    expected = [Expected(leg.call, plan.adapter.name) for leg in legs]
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
        return Expected(leg.call, plan.adapter.name).result(result)
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


def _value(value: Any, default: Any = None) -> Any:
    """A request field's value, or `default` when it is absent or null (null means "not set")."""
    return default if value is MISSING or value is None else value


def _stop(value: Any) -> list[str]:
    value = _value(value)
    if value is None:
        return []
    root = value.root
    return [root] if isinstance(root, str) else [item.root for item in root]
