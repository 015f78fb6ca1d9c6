"""A chat completion request, from its validated body to its vendor calls and back.

A chat request is one vendor call when the vendor takes `n` choices in one request (the OpenAI
protocol; the embedded model fans `n` out itself). Where the vendor's record says it takes fewer
(Gemini's `candidateCount` up to `max_candidates`) or none (`n` emulated: Anthropic), the gateway
fans out: concurrent calls of at most that many choices each, choice i sampling with seed + i,
the choices renumbered in order, the usage told to the client with the conversation counted once
(OpenAI's semantics) and billed with every call's (as completions do, planner/plan.py).

Its parameters are judged against the adapter's chat record (planner/capabilities.py `verdict`,
the same function completions are judged by): each one a request sets is passed on (native),
served by the gateway (`user` recorded, `n` fanned out), or refused with a 400 naming it and the
vendor. A parameter set to the value that asks for nothing (`n: 1`, `response_format: text`...)
needs nothing of a vendor that lacks it, and is not sent. An adapter may refuse values its
record cannot say (its translator's `refused`: an image it cannot take, say). What comes back is held to
what was asked (planner/chat_verify.py) before the client sees it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import jsonschema_rs

from gateway.core import observe
from gateway.core.chat import ChatCall, prompt_text
from gateway.core.clearance import CLEAR, Clearance
from gateway.core.completion import Attempt, Chunk, Result, Usage, candidates_usage, choice_seed, summed_usage
from gateway.core.endpoint import Endpoint
from gateway.core.errors import BadRequest, ParameterOutOfRange, UnsupportedParameter
from gateway.core.parameters import EMULATED, GATEWAY_FIELDS, NATIVE, UNSUPPORTED
from gateway.core.streams import all_of, merged
from gateway.planner.capabilities import verdict
from gateway.planner.chat_verify import ChatExpected, answer_schema
from gateway.planner.plan import FANOUT_CONCURRENCY
from gateway.vendors.base import Adapter, Translator
from gateway.vendors.registry import Registry

# Values that ask a vendor for nothing beyond its default: a vendor lacking the parameter serves
# them as it is (the parameter is not sent), so clients that spell out defaults work everywhere.
AS_IF_UNSET: dict[str, Any] = {
    "n": 1,
    "response_format": {"type": "text"},
    "parallel_tool_calls": True,
    "logprobs": False,
    "store": False,
    "frequency_penalty": 0,
    "presence_penalty": 0,
}


@dataclass(slots=True)
class ChatPlan:
    adapter: Adapter
    translator: Translator[ChatCall]  # the adapter's for chat
    model: str  # as the client wrote it: "vendor/name"
    call: ChatCall
    include_usage: bool
    user: str | None  # the request's end user, whether or not the vendor is sent it
    prompts: list[str]  # the conversation as text, for an estimate of its tokens (one "prompt")
    # The vendor calls, when `n` is fanned out: (the first choice's index, the call); else only `call`.
    legs: list[tuple[int, ChatCall]] = field(default_factory=list)
    # What every call's answer must match (a strict json_schema), compiled once for all of them.
    answer_schema: jsonschema_rs.Validator | None = None

    @property
    def stream(self) -> bool:
        return self.call.stream

    @property
    def n(self) -> int:
        return sum(call.n for _, call in self.legs) if self.legs else self.call.n

    @property
    def vendor_calls(self) -> int:
        return len(self.legs) or 1

    @property
    def choices(self) -> int:
        return self.n

    def echoed(self, index: int) -> str:
        return ""  # a chat answer repeats nothing of its request

    def attempt(self) -> Attempt:
        """What the usage ledger records of this plan's vendor call."""
        count_tokens = getattr(self.adapter, "count_tokens", None)  # vendors.base.CountsTokens
        model = self.call.model
        own = (lambda text: count_tokens(model, text)) if count_tokens is not None else None
        max_tokens = self.call.max_tokens
        calls = self.vendor_calls
        return Attempt(vendor=self.adapter.name, model=self.model, streamed=self.stream, end_user=self.user,
                       prompts_sent=tuple(self.prompts) * calls, endpoint=Endpoint.CHAT, vendor_calls=calls,
                       max_completion_tokens=None if max_tokens is None else max_tokens * self.n,
                       count_tokens=own, served_by=self.call.served_by)

    async def complete(self) -> Result:
        if not self.legs:
            result = await self._complete(self.call)
            result.billed = result.usage  # one vendor call: what the client is told is what it billed
            return result
        gate = asyncio.Semaphore(FANOUT_CONCURRENCY)

        async def run(call: ChatCall) -> Result:
            async with gate:
                return await self._complete(call)

        # The first call's failure is the request's answer; the others are abandoned (core/streams.py).
        results = await all_of([run(call) for _, call in self.legs])
        choices = []
        for (first, _), result in zip(self.legs, results, strict=True):
            for choice in result.choices:
                choice.index += first
                choices.append(choice)
        choices.sort(key=lambda c: c.index)
        usages = [r.usage for r in results]
        return Result(choices, candidates_usage(usages), results[0].system_fingerprint, summed_usage(usages))

    async def _complete(self, call: ChatCall) -> Result:
        span = observe.current().vendor_call(self.adapter.name, call)
        try:
            with span.current():
                result = await self.translator.complete(call)
            span.result(result)
            ChatExpected(call, self.adapter.name, self.answer_schema).result(result)
            return result
        except BaseException as exc:
            span.failed(exc)
            raise
        finally:
            span.end()

    async def chunks(self) -> AsyncIterator[list[Chunk]]:
        """The vendor's chunks, held to what was asked as they come, then one final chunk with the
        usage (None when a vendor call reported none), as planner/plan.py's streams end. Fanned-out
        calls are relayed as their chunks come, renumbered."""
        if not self.legs:
            usage: list[Usage | None] = [None]
            async with aclosing(self._chunks(self.call, usage)) as batches:
                async for batch in batches:
                    yield batch
            yield [Chunk([], usage[0], usage[0])]
            return
        gate = asyncio.Semaphore(FANOUT_CONCURRENCY)
        usages: list[Usage | None] = [None] * len(self.legs)

        async def leg(number: int) -> AsyncIterator[list[Chunk]]:
            first, call = self.legs[number]
            async with gate, aclosing(self._chunks(call, usages, number)) as batches:
                async for batch in batches:
                    for chunk in batch:
                        for choice in chunk.choices:
                            choice.index += first
                    yield batch

        async with aclosing(merged([leg(number) for number in range(len(self.legs))], buffered=64)) as batches:
            async for _, batch in batches:  # a slow client slows the calls down
                yield batch
        yield [Chunk([], candidates_usage(usages), summed_usage(usages))]

    async def _chunks(self, call: ChatCall, usages: list[Usage | None], number: int = 0) -> AsyncIterator[list[Chunk]]:
        """One vendor call's chunks with choices, held to what it was asked; its usage into `usages`."""
        span = observe.current().vendor_call(self.adapter.name, call)
        expected = ChatExpected(call, self.adapter.name, self.answer_schema)
        async with aclosing(observe.observed_stream(span, self.translator.stream(call))) as batches:
            async for batch in batches:
                relayed = []
                for chunk in batch:
                    expected.chunk(chunk)
                    if chunk.usage is not None:
                        usages[number] = chunk.usage
                    if chunk.choices:
                        relayed.append(chunk if chunk.usage is None else Chunk(chunk.choices))
                if relayed:
                    yield relayed
        expected.ended()


def plan_chat(body: Mapping[str, Any], registry: Registry, max_vendor_calls: int | None = None,
              clearance: Clearance = CLEAR) -> ChatPlan:
    """The vendor calls that serve the chat request `body` (the contract's model of it, as JSON
    values), each awaiting the request's `clearance`; at most `max_vendor_calls` of them (settings)."""
    vendor, _, model = body["model"].partition("/")
    adapter = registry.serving(vendor, model, Endpoint.CHAT)
    translator = adapter.translators[Endpoint.CHAT]
    parameters = {name: value for name, value in body.items()
                  if name not in GATEWAY_FIELDS and name != "messages" and value is not None}
    call = ChatCall(model=model, messages=body["messages"], parameters=parameters, stream=bool(body.get("stream")),
                    clearance=clearance)
    served_here = check(adapter, translator, call)
    if served_here:
        call.parameters = {name: value for name, value in parameters.items() if name not in served_here}
    options = body.get("stream_options") or {}
    return ChatPlan(adapter=adapter, translator=translator, model=body["model"], call=call, include_usage=bool(options.get("include_usage")),
                    user=parameters.get("user"), prompts=[prompt_text(call.messages)],
                    legs=_fan_out(adapter, translator, call, parameters.get("n") or 1, max_vendor_calls),
                    answer_schema=answer_schema(call))


def check(adapter: Adapter, translator: Translator[ChatCall], call: ChatCall) -> set[str]:
    """Refuse what the vendor cannot be given (400 naming parameter and vendor); the parameters the
    gateway serves itself or that ask for nothing (never sent to the vendor)."""
    caps, vendor = translator.capabilities, adapter.name
    served_here = set()
    for name in ("messages", *call.parameters):
        found = verdict(caps, name)
        value = call.given(name)
        if found.kind != NATIVE and name in AS_IF_UNSET and value == AS_IF_UNSET[name]:
            served_here.add(name)
            continue
        if found.kind == UNSUPPORTED:
            raise UnsupportedParameter(name, vendor, found.detail or "")
        if found.range is not None and value not in found.range:
            raise ParameterOutOfRange(name, vendor, value, str(found.range))
        if found.kind == EMULATED:
            served_here.add(name)
    refused = getattr(translator, "refused", None)  # vendors.base.RefusesValues
    if refused is not None and (why := refused(call)) is not None:
        raise UnsupportedParameter(why[0], vendor, why[1])
    return served_here


def _fan_out(adapter: Adapter, translator: Translator[ChatCall], call: ChatCall, n: int, max_calls: int | None) -> list[tuple[int, ChatCall]]:
    """The calls of at most the vendor's choices per call that make `n` choices ([] for one call)."""
    per_call = translator.capabilities.per_call("n") or n
    if n <= per_call:
        return []
    calls = -(-n // per_call)
    if max_calls is not None and calls > max_calls:
        raise BadRequest(f"vendor '{adapter.name}' takes {per_call} choice(s) per call: this request would need "
                         f"{calls} vendor calls, more than the gateway's limit of {max_calls}",
                         code="too_many_vendor_calls", param="n", vendor=adapter.name)
    legs = []
    seed = call.parameters.get("seed")
    for first in range(0, n, per_call):
        parameters = dict(call.parameters)
        count = min(per_call, n - first)
        parameters.pop("n", None)
        if count > 1:
            parameters["n"] = count
        if seed is not None:
            parameters["seed"] = choice_seed(seed, first)
        legs.append((first, dataclasses.replace(call, parameters=parameters)))  # one `served_by` list for all
    return legs
