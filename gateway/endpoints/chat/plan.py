"""A chat completion request's plan: its one vendor-neutral call (`ChatCall`: the request as the
contract's model wrote it, less what the planner decided), its parameters judged against the
vendor's chat translator (planner/capabilities.py `check_chat`), and the fan-out of `n` beyond
what the vendor takes per call, by the one planner (planner/plan.py).

A chat request is one vendor call when the vendor takes `n` choices in one request (the OpenAI
protocol; the embedded model fans `n` out itself). Where the vendor's record says it takes fewer
(Gemini's `candidateCount` up to `max_candidates`) or none (`n` emulated: Anthropic), the planner
fans out: concurrent calls of at most that many choices each, choice i sampling with seed + i, the
usage told to the client with the conversation counted once (OpenAI's semantics) and billed with
every call's. What comes back is held to what was asked (planner/verify.py) before the client
sees it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.chat import ChatCall, prompt_text
from gateway.core.clearance import CLEAR, Clearance
from gateway.core.endpoint import Endpoint
from gateway.core.parameters import GATEWAY_FIELDS
from gateway.planner import capabilities
from gateway.planner.plan import Plan, fan_out
from gateway.planner.verify import answer_schema
from gateway.vendors.registry import Registry


def plan_chat(body: Mapping[str, Any], registry: Registry, max_vendor_calls: int | None = None,
              clearance: Clearance = CLEAR) -> Plan:
    """The vendor calls that serve the chat request `body` (the contract's model of it, as JSON
    values), each awaiting the request's `clearance`; at most `max_vendor_calls` of them (settings)."""
    vendor, _, model = body["model"].partition("/")
    adapter = registry.serving(vendor, model, Endpoint.CHAT)
    translator = adapter.translators[Endpoint.CHAT]
    parameters = {name: value for name, value in body.items()
                  if name not in GATEWAY_FIELDS and name != "messages" and value is not None}
    messages = body["messages"]
    call = ChatCall(model=model, messages=messages, parameters=parameters, stream=bool(body.get("stream")),
                    clearance=clearance, prompts=[prompt_text(messages)])
    n = call.n
    served_here = capabilities.check_chat(adapter, translator, call)
    if served_here:  # never sent to the vendor (`n` is fanned out: each call says its own)
        call.parameters = {name: value for name, value in parameters.items() if name not in served_here}
    options = body.get("stream_options") or {}
    return Plan(adapter=adapter, translator=translator, model=body["model"], prompts=call.prompts, n=n,
                legs=fan_out(adapter, translator, call, n, max_vendor_calls), stream=call.stream,
                include_usage=bool(options.get("include_usage")), user=parameters.get("user"),
                answer_schema=answer_schema(call))
