"""The chat endpoint's unit (endpoints/unit.py `EndpointUnit`): the contract's
`ChatCompletionRequest`, its rules the schema cannot say kept (rules.py), planned by
plan.py, its demand the conversation once per choice, its answer a `chat.completion`
(answer.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.chat import DEFAULT_MAX_TOKENS, prompt_text
from gateway.core.clearance import Clearance
from gateway.core.completion import Result, Usage
from gateway.core.demand import Demand
from gateway.core.endpoint import Endpoint
from gateway.endpoints import unit
from gateway.endpoints.chat import answer, rules
from gateway.endpoints.chat.plan import plan_chat
from gateway.planner.plan import Plan
from gateway.vendors.registry import Registry
from generated.models import ChatCompletionRequest

# The contract's defaults (openapi.json), left out of the cache's canonical form like a field not given.
DEFAULTS = {"n": 1, "temperature": 1, "top_p": 1, "frequency_penalty": 0, "presence_penalty": 0, "logprobs": False}


@dataclass(frozen=True, slots=True)
class AskedChat:
    """A chat request as its unit accepted it: the contract's model, and its values as JSON (the
    model's types: an `n` of 2.0 is the int 2; the fields not given absent), which the rules, the
    plan and the cache read. Made once per request."""

    request: ChatCompletionRequest
    body: Mapping[str, Any]

    @property
    def model(self) -> str:
        return self.request.model


class Chat:
    endpoint = Endpoint.CHAT
    id_prefix = "chatcmpl-"
    answer_object = "chat.completion"
    chunk_object = "chat.completion.chunk"

    def accepted(self, request: ChatCompletionRequest) -> AskedChat:
        body = request.model_dump(by_alias=True)
        rules.check(body)
        return AskedChat(request, body)

    def cache_form(self, asked: AskedChat) -> Mapping[str, Any]:
        return unit.cache_form(asked.body, DEFAULTS)

    def plan(self, asked: AskedChat, model: str, registry: Registry, max_vendor_calls: int,
             clearance: Clearance) -> Plan:
        body = asked.body if model == asked.model else {**asked.body, "model": model}
        return plan_chat(body, registry, max_vendor_calls, clearance)

    def demand(self, asked: AskedChat, plan: Plan | None, falls_back: bool) -> Demand:
        """What a chat request can cost at most: the conversation once per choice (the embedded
        model makes a call per choice; a vendor that bills it once costs less), counted as the
        ledger counts, plus the most tokens every choice may generate. The same bound with a plan
        or without, on any vendor."""
        body = asked.body
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
        choices = body.get("n") or 1
        return Demand(Endpoint.CHAT, asked.model, [prompt_text(body["messages"])] * choices, max_tokens * choices,
                      bool(body.get("stream")), body.get("user"))

    def body(self, head: Mapping[str, Any], plan: Plan, result: Result, usage: Usage) -> bytes:
        return answer.body(head, result, usage)

    def shape(self) -> answer.Shape:
        return answer.Shape()  # it keeps which choices began: one per stream


UNIT = Chat()
