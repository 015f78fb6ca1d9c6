"""From a validated request to vendor calls, and their answers back into one completion.

The planner reads the adapter's `Capabilities` before any vendor call (gateway/capabilities.py):
each parameter a request uses is passed through (native), emulated by the gateway, or rejected
with a 400 naming it and the vendor. List prompts and `n` beyond what one vendor call takes are
emulated by concurrent fan-out; the answers are merged with OpenAI's prompt-major indexing,
`index = prompt_index * n + i`. The other emulations (echo, stop, best_of) are applied to each
vendor call's answer by gateway/emulation.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from pydantic import MISSING

from gateway import capabilities
from gateway.emulation import Emulation
from gateway.errors import InvalidRequest, invalid_field
from gateway.streams import merged
from generated.models import CompletionRequest
from vendors.base import Adapter, Chunk, CompletionCall, Result, Usage
from vendors.registry import Registry

DEFAULT_MAX_TOKENS = 16  # the contract's default
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
    model: str  # as the client wrote it: "vendor/name"
    prompts: list[str]
    n: int
    legs: list[Leg]
    stream: bool
    include_usage: bool
    emulation: Emulation

    @property
    def per_prompt(self) -> int:
        """Choices generated per prompt (best_of candidates when the gateway ranks them)."""
        return self.emulation.per_prompt(self.n)


def plan(request: CompletionRequest, registry: Registry, max_vendor_calls: int) -> Plan:
    """The vendor calls that serve `request`; at most `max_vendor_calls` of them (settings)."""
    vendor, _, model = request.model.partition("/")
    adapter = registry.get(vendor)
    prompts = [request.prompt] if isinstance(request.prompt, str) else list(request.prompt.root)
    n = _value(request.n) or 1
    best_of = _value(request.best_of)
    if best_of is not None and best_of < n:
        raise invalid_field(("best_of",), f"best_of ({best_of}) must be at least n ({n})", "value_error", best_of)
    stop = _stop(request.stop)
    call = CompletionCall(
        model=model,
        prompts=prompts,
        max_tokens=_value(request.max_tokens, DEFAULT_MAX_TOKENS),
        n=n,
        stream=bool(_value(request.stream)),
        best_of=best_of if best_of is not None and best_of > n else None,
        echo=bool(_value(request.echo)),
        frequency_penalty=_value(request.frequency_penalty),
        presence_penalty=_value(request.presence_penalty),
        logit_bias=_value(request.logit_bias) or None,
        logprobs=_value(request.logprobs),
        seed=_value(request.seed),
        stop=stop,
        suffix=_value(request.suffix),
        temperature=_value(request.temperature),
        top_p=_value(request.top_p),
        user=_value(request.user),
    )
    emulation = capabilities.check(adapter, call)
    options = _value(request.stream_options)
    return Plan(
        adapter=adapter,
        model=request.model,
        prompts=prompts,
        n=n,
        legs=_fan_out(adapter, emulation.vendor_call(call), max_vendor_calls),
        stream=call.stream,
        include_usage=bool(options and _value(options.include_usage)),
        emulation=emulation,
    )


def _fan_out(adapter: Adapter, call: CompletionCall, max_calls: int) -> list[Leg]:
    caps = adapter.capabilities
    per_call = caps.prompts_per_call or len(call.prompts)
    n_per_call = (caps.n_per_call or call.n) if "n" in caps.native else 1
    calls = -(-len(call.prompts) // per_call) * -(-call.n // n_per_call)
    if calls > max_calls:
        # Concurrency is bounded too (FANOUT_CONCURRENCY), but a request must not turn into an
        # unbounded number of billed vendor calls.
        raise InvalidRequest(
            f"vendor '{adapter.name}' takes {per_call} prompt(s) and {n_per_call} choice(s) per call: this request "
            f"would need {calls} vendor calls, more than the gateway's limit of {max_calls}",
            code="too_many_vendor_calls",
            param="prompt" if len(call.prompts) > 1 else "n",
            vendor=adapter.name,
        )
    legs = []
    for first_prompt in range(0, len(call.prompts), per_call):
        for first_choice in range(0, call.n, n_per_call):
            seed = call.seed
            if seed is not None and first_choice:
                # Distinct samples for each n, still reproducible: the i-th choice uses seed + i.
                seed += first_choice
            leg_call = dataclasses.replace(
                call,
                prompts=call.prompts[first_prompt : first_prompt + per_call],
                n=min(n_per_call, call.n - first_choice),
                seed=seed,
            )
            legs.append(Leg(leg_call, first_prompt, first_choice))
    return legs


async def complete(plan: Plan) -> Result:
    """Run every leg (bounded concurrency) and merge the answers in the client's index order."""
    legs = plan.legs
    if len(legs) == 1:
        results = [await plan.adapter.complete(legs[0].call)]
    else:
        gate = asyncio.Semaphore(FANOUT_CONCURRENCY)

        async def run(leg: Leg) -> Result:
            async with gate:
                return await plan.adapter.complete(leg.call)

        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(run(leg)) for leg in legs]
        except ExceptionGroup as failed:
            # The first leg's failure is the request's answer (e.g. a 400 for one bad prompt of a
            # list); the group itself would be an unhandled error, a 500.
            raise failed.exceptions[0] from None
        results = [task.result() for task in tasks]
    choices = []
    for leg, result in zip(legs, results, strict=True):
        for choice in result.choices:
            choice.index = leg.index(choice.index, plan.per_prompt)
            choices.append(choice)
    choices.sort(key=lambda c: c.index)
    merged = Result(choices=choices, usage=_total([r.usage for r in results]),
                    system_fingerprint=results[0].system_fingerprint)
    if plan.emulation.rewrites_result:
        return plan.emulation.complete(merged, plan.prompts, plan.n, plan.adapter.name)
    return merged


async def stream(plan: Plan) -> AsyncIterator[Chunk]:
    """Chunks of every leg as they come (at most FANOUT_CONCURRENCY legs at once), re-indexed,
    then one final chunk with the total usage (`usage` is None when some leg did not report it)."""
    gate = asyncio.Semaphore(FANOUT_CONCURRENCY)
    usages: list[Usage | None] = [None] * len(plan.legs)

    async def leg_chunks(leg: Leg) -> AsyncIterator[Chunk]:
        async with gate, aclosing(_vendor_stream(plan, leg)) as chunks:
            async for chunk in chunks:
                yield chunk

    legs = [leg_chunks(leg) for leg in plan.legs]
    async with aclosing(merged(legs, buffered=64)) as chunks:  # a slow client slows the legs down
        async for number, chunk in chunks:
            if chunk.usage is not None:
                usages[number] = chunk.usage
            if chunk.choices:
                leg = plan.legs[number]
                for choice in chunk.choices:
                    choice.index = leg.index(choice.index, plan.per_prompt)
                yield Chunk(chunk.choices)
    yield Chunk([], _total(usages))


def _vendor_stream(plan: Plan, leg: Leg) -> AsyncIterator[Chunk]:
    chunks = plan.adapter.stream(leg.call)
    if plan.emulation.rewrites_stream:
        return plan.emulation.stream(chunks, leg.call.prompts, leg.call.n)
    return chunks


def _total(usages: list[Usage | None]) -> Usage | None:
    if any(u is None for u in usages):
        return None
    total = usages[0]
    for usage in usages[1:]:
        total = total + usage
    return total


def _value(value: Any, default: Any = None) -> Any:
    """A request field's value, or `default` when it is absent or null (null means "not set")."""
    return default if value is MISSING or value is None else value


def _stop(value: Any) -> list[str]:
    value = _value(value)
    if value is None:
        return []
    root = value.root
    return [root] if isinstance(root, str) else [item.root for item in root]
