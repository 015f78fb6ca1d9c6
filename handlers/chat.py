"""POST /v5/chat/completions: the same way as completions (http/serving.py), its own answer shape."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import Response

from gateway.core.chat import DEFAULT_MAX_TOKENS, ChatChoice, prompt_text
from gateway.core.completion import Choice, Chunk, Result, Usage
from gateway.core.endpoint import Endpoint
from gateway.core.ids import ids
from gateway.core.model_names import resolved
from gateway.http import cache
from gateway.http.answer_stream import EventStream, no_echo, parsed_body, usage_body
from gateway.http.context import HandlerRequest
from gateway.http.lifecycle import Lifecycle
from gateway.http.server import security
from gateway.http.serving import serve
from gateway.limits import on_request
from gateway.planner import chat_rules
from gateway.planner.chat_plan import ChatPlan, plan_chat
from generated.models import ChatCompletionRequest


async def create(request: HandlerRequest) -> Response:
    services = request.services
    security.refuse_callers_vendor_key(request.headers)
    account = request.caller.account(request.headers.get("x-selected-account-id"))
    # An alias is its model from here on: limits, cache, plan, answer and ledger (core/model_names.py).
    request.body["model"] = resolved(request.body["model"], services.settings.aliases, services.settings.vendors)
    body = parsed_body(ChatCompletionRequest, request.body)  # the contract's types (a 422 when pydantic disagrees)
    chat_rules.check(body)
    request_id = f"chatcmpl-{ids.next()}"
    looked = await cache.look_up(request, account, Endpoint.CHAT, body["model"], lambda: cache.chat_form(body))
    life = Lifecycle(request, request_id, account, looked.demand(demand(body)))

    def plan_for(model: str) -> ChatPlan:
        return plan_chat(body if model == body["model"] else body | {"model": model}, services.registry,
                         services.settings.max_vendor_calls)

    return await serve(request, life, body["model"], plan_for, _Chat(request_id, int(time.time()), services.redact),
                       looked)


def demand(body: dict[str, Any]) -> on_request.Demand:
    """What a chat request can cost at most: the conversation once per choice (the embedded model
    makes a call per choice; a vendor that bills it once costs less), counted as the ledger counts
    (on_request.Demand), plus the most tokens every choice may generate."""
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
    choices = body.get("n") or 1
    return on_request.Demand(body["model"], [prompt_text(body["messages"])] * choices, max_tokens * choices,
                           bool(body.get("stream")), body.get("user"), endpoint=Endpoint.CHAT)


class _Chat:
    """How a chat completion is written (http/serving.py Answer)."""

    def __init__(self, request_id: str, created: int, redact: Callable[[str], str]) -> None:
        self._id = request_id
        self._created = created
        self._redact = redact

    def vendor_calls(self, plan: ChatPlan) -> int:
        return plan.vendor_calls

    def echoed(self, plan: ChatPlan) -> Callable[[int], str]:
        return no_echo

    def body(self, plan: ChatPlan, result: Result, usage: Usage) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self._id,
            "object": "chat.completion",
            "created": self._created,
            "model": plan.model,
            "choices": [_choice(c) for c in sorted(result.choices, key=lambda c: c.index)],
            "usage": usage_body(usage),
        }
        if result.system_fingerprint:
            body["system_fingerprint"] = result.system_fingerprint
        return body

    def stream(self, plan: ChatPlan, first: list[Chunk], rest: AsyncIterator[list[Chunk]],
               life: Lifecycle) -> EventStream:
        head = {"id": self._id, "object": "chat.completion.chunk", "created": self._created, "model": plan.model}
        return EventStream(plan, plan.n, _Shape(), head, first, rest, life, self._redact, no_echo)


def _choice(choice: Choice) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": choice.text or None}
    if isinstance(choice, ChatChoice):
        if choice.tool_calls:
            message["tool_calls"] = choice.tool_calls
        if choice.function_call is not None:
            message["function_call"] = choice.function_call
        message["refusal"] = choice.refusal
    if message["content"] is None and not message.get("tool_calls") and message.get("function_call") is None:
        message["content"] = ""
    return {"index": choice.index, "message": message, "finish_reason": choice.finish_reason or "stop",
            "logprobs": choice.logprobs}


class _Shape:
    """A streamed chat completion's choices as OpenAI sends them: `delta.role` on each choice's
    first chunk, then its content, tool call and refusal pieces, its one finish reason."""

    def __init__(self) -> None:
        self._begun: set[int] = set()

    def piece(self, choice: Choice, finish: str | None) -> dict[str, Any] | None:
        delta: dict[str, Any] = {}
        if choice.index not in self._begun:
            self._begun.add(choice.index)
            delta = {"role": "assistant", "content": ""}
        if choice.text:
            delta["content"] = choice.text
        if isinstance(choice, ChatChoice):
            if choice.tool_calls:
                delta["tool_calls"] = choice.tool_calls
            if choice.function_call:
                delta["function_call"] = choice.function_call
            if choice.refusal:
                delta["refusal"] = choice.refusal
        if not delta and finish is None and not choice.logprobs:
            return None
        return {"index": choice.index, "delta": delta, "finish_reason": finish, "logprobs": choice.logprobs}

    def closing(self, index: int) -> dict[str, Any]:
        delta = {} if index in self._begun else {"role": "assistant", "content": ""}
        return {"index": index, "delta": delta, "finish_reason": "stop", "logprobs": None}
