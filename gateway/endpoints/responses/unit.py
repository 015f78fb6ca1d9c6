"""The Responses endpoint's unit (endpoints/unit.py `EndpointUnit`): the contract's
`ResponseCreateRequest` with the stored conversation it continues (read by its handler before the
way begins), planned as one vendor call (plan.py: on the vendor's own Responses API, or bridged
through its chat), its demand the whole conversation, its answer a `response` (answer.py, or the
vendor's own read by native.py) and its stream OpenAI's Responses events (stream.py, or the
vendor's own: native.py; written by http/response_events.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.core.chat import DEFAULT_MAX_TOKENS, ChatChoice, prompt_text
from gateway.core.clearance import Clearance
from gateway.core.completion import Choice, Result, Usage
from gateway.core.demand import Demand
from gateway.core.endpoint import Endpoint
from gateway.core.inference import NativeChoice
from gateway.endpoints import unit
from gateway.endpoints.responses import rules
from gateway.endpoints.responses.answer import response_from_chat, usage_from_chat
from gateway.endpoints.responses.plan import AnyResponsesPlan, plan_responses
from gateway.endpoints.responses.request import conversation_text, input_items
from gateway.endpoints.usage import usage_body
from gateway.vendors.registry import Registry

# The contract's defaults, and the fields that do not make the answer what it is (kept, echoed, or
# standing for the stored conversation, which the cache's form holds itself).
DEFAULTS = {"temperature": 1, "top_p": 1, "parallel_tool_calls": True, "truncation": "disabled"}
NOT_THE_ANSWER = frozenset({"store", "metadata", "previous_response_id", "include"})


@dataclass(frozen=True, slots=True)
class AskedResponses:
    """A Responses request as its handler prepared it: its JSON values (the fields not given absent)
    and the stored conversation its `previous_response_id` names (oldest first; empty without one)."""

    body: Mapping[str, Any]
    history: Sequence[dict[str, Any]] = field(default_factory=tuple)

    @property
    def model(self) -> str:
        return self.body["model"]


class Responses:
    endpoint = Endpoint.RESPONSES
    id_prefix = "resp_"
    answer_object = "response"
    chunk_object = "response"

    def accepted(self, request: AskedResponses) -> AskedResponses:
        rules.check(request.body)  # its client schemas; the rest is judged per vendor (plan.py)
        return request

    def cache_form(self, asked: AskedResponses) -> Mapping[str, Any]:
        form = unit.cache_form({k: v for k, v in asked.body.items() if k not in NOT_THE_ANSWER}, DEFAULTS)
        if asked.history:
            form["history"] = list(asked.history)
        return form

    def plan(self, asked: AskedResponses, model: str, registry: Registry, max_vendor_calls: int,
             clearance: Clearance) -> AnyResponsesPlan:
        return plan_responses(asked.body, asked.history, model, registry, max_vendor_calls, clearance)

    def demand(self, asked: AskedResponses, plan: AnyResponsesPlan | None, falls_back: bool) -> Demand:
        """The conversation (stored chain included) once, and the most tokens the answer may take:
        the same bound with a plan or without, on any vendor."""
        body = asked.body
        prompt = plan.prompts if plan is not None else [_text(asked)]
        return Demand(Endpoint.RESPONSES, asked.model, prompt, body.get("max_output_tokens") or DEFAULT_MAX_TOKENS,
                      bool(body.get("stream")), body.get("user"))

    def body(self, head: Mapping[str, Any], plan: AnyResponsesPlan, result: Result, usage: Usage) -> bytes:
        return orjson.dumps(response(head, plan, result.choices, usage))

    def shape(self) -> unit.Shape:
        raise AssertionError("a Responses stream is written by http/response_events.py from the choices themselves")


def response(head: Mapping[str, Any], plan: AnyResponsesPlan, choices: Sequence[Choice],
             usage: Usage) -> dict[str, Any]:
    """The `response` of a whole answer (its one choice) with `usage`, the client's: the vendor's
    own response (native_plan.py) given the request's id, time and model, or a chat choice's (a
    bridged vendor's, or a cache entry's) shaped into one."""
    first = min(choices, key=lambda c: c.index)
    if isinstance(first, NativeChoice):
        return {**first.response, "id": head["id"], "created_at": head["created"], "model": head["model"],
                "usage": usage_from_chat(usage_body(usage))}
    completion = {"choices": [{"index": 0, "message": message(first), "finish_reason": first.finish_reason or "stop"}],
                  "usage": usage_body(usage)}
    return response_from_chat(dict(plan.request), completion, response_id=head["id"], created_at=head["created"],
                              model=head["model"])


def message(choice: Choice) -> dict[str, Any]:
    """A chat choice as chat's answer message (what answer.py reads)."""
    found: dict[str, Any] = {"role": "assistant", "content": choice.text or None}
    if isinstance(choice, ChatChoice):
        if choice.tool_calls:
            found["tool_calls"] = choice.tool_calls
        found["refusal"] = choice.refusal
    if found["content"] is None and not found.get("tool_calls") and found.get("refusal") is None:
        found["content"] = ""
    return found


def _text(asked: AskedResponses) -> str:
    """The conversation as text, as an estimate counts it, when no plan says it."""
    items = [*asked.history, *input_items(dict(asked.body))]
    return prompt_text([{"role": "user", "content": conversation_text(asked.body.get("instructions"), items)}])


UNIT = Responses()
