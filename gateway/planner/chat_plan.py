"""A chat completion request, from its validated body to one vendor call and back.

A chat request is one vendor call: every protocol takes a conversation and `n` in one request
(the embedded model fans `n` out itself). Its parameters are judged against the adapter's chat
record (planner/capabilities.py `verdict`, the same function completions are judged by): each one
a request sets is passed on (native), recorded by the gateway (`user` on a vendor without an
end-user field), or refused with a 400 naming it and the vendor. What comes back is held to what
was asked (planner/chat_verify.py) before the client sees it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from gateway.core import observe
from gateway.core.chat import ChatCall, prompt_text
from gateway.core.completion import Attempt, Chunk, Result, Usage
from gateway.core.errors import ParameterOutOfRange, UnsupportedParameter
from gateway.core.parameters import EMULATED, UNSUPPORTED, GATEWAY_FIELDS
from gateway.planner.capabilities import verdict
from gateway.planner.chat_verify import ChatExpected
from gateway.vendors.base import Adapter
from gateway.vendors.registry import Registry


@dataclass(slots=True)
class ChatPlan:
    adapter: Adapter
    model: str  # as the client wrote it: "vendor/name"
    call: ChatCall
    include_usage: bool
    user: str | None  # the request's end user, whether or not the vendor is sent it
    prompts: list[str]  # the conversation as text, for an estimate of its tokens (one "prompt")

    @property
    def stream(self) -> bool:
        return self.call.stream

    @property
    def n(self) -> int:
        return self.call.n

    def attempt(self) -> Attempt:
        """What the usage ledger records of this plan's vendor call."""
        count_tokens = getattr(self.adapter, "count_tokens", None)  # vendors.base.CountsTokens
        model = self.call.model
        own = (lambda text: count_tokens(model, text)) if count_tokens is not None else None
        max_tokens = self.call.max_tokens
        return Attempt(vendor=self.adapter.name, model=self.model, streamed=self.stream, end_user=self.user,
                       prompts_sent=tuple(self.prompts), endpoint="chat",
                       max_completion_tokens=None if max_tokens is None else max_tokens * self.n,
                       count_tokens=own, served_by=self.call.served_by)

    async def complete(self) -> Result:
        span = observe.current().vendor_call(self.adapter.name, self.call)
        try:
            with span.current():
                result = await self.adapter.chat_complete(self.call)
            span.result(result)
            ChatExpected(self.call, self.adapter.name).result(result)
            result.billed = result.usage  # one vendor call: what the client is told is what it billed
            return result
        except BaseException as exc:
            span.failed(exc)
            raise
        finally:
            span.end()

    async def chunks(self) -> AsyncIterator[list[Chunk]]:
        """The vendor's chunks, held to what was asked as they come, then one final chunk with the
        usage (None when the vendor reported none), as planner/plan.py's streams end."""
        span = observe.current().vendor_call(self.adapter.name, self.call)
        expected = ChatExpected(self.call, self.adapter.name)
        usage: Usage | None = None
        async with aclosing(observe.observed_stream(span, self.adapter.chat_stream(self.call))) as batches:
            async for batch in batches:
                relayed = []
                for chunk in batch:
                    expected.chunk(chunk)
                    if chunk.usage is not None:
                        usage = chunk.usage
                    if chunk.choices:
                        relayed.append(chunk if chunk.usage is None else Chunk(chunk.choices))
                if relayed:
                    yield relayed
        expected.ended()
        yield [Chunk([], usage, usage)]


def plan_chat(body: Mapping[str, Any], registry: Registry) -> ChatPlan:
    """The vendor call that serves the chat request `body` (validated by the contract)."""
    vendor, _, model = body["model"].partition("/")
    adapter = registry.get(vendor)
    parameters = {name: value for name, value in body.items()
                  if name not in GATEWAY_FIELDS and name != "messages" and value is not None}
    call = ChatCall(model=model, messages=body["messages"], parameters=parameters, stream=bool(body.get("stream")))
    recorded = check(adapter, call)
    if recorded:
        call.parameters = {name: value for name, value in parameters.items() if name not in recorded}
    options = body.get("stream_options") or {}
    return ChatPlan(adapter=adapter, model=body["model"], call=call, include_usage=bool(options.get("include_usage")),
                    user=parameters.get("user"), prompts=[prompt_text(call.messages)])


def check(adapter: Adapter, call: ChatCall) -> set[str]:
    """Refuse what the vendor cannot be given (400 naming parameter and vendor); the parameters the
    gateway serves itself (never sent to the vendor)."""
    caps, vendor = adapter.chat_capabilities, adapter.name
    emulated = set()
    for name in ("messages", *call.parameters):
        found = verdict(caps, name)
        if found.kind == UNSUPPORTED:
            raise UnsupportedParameter(name, vendor, found.detail or "")
        value = call.given(name)
        if found.range is not None and value not in found.range:
            raise ParameterOutOfRange(name, vendor, value, str(found.range))
        if found.kind == EMULATED:
            emulated.add(name)
    return emulated
