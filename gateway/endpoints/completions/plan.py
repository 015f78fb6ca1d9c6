"""A completion request's plan: its one vendor-neutral call (`CompletionCall`, every contract
default applied), its parameters judged against the vendor's completions translator
(planner/capabilities.py `check`: native, emulated, or a 400 naming it and the vendor), the
emulations it needs (planner/emulation.py: echo, stop, best_of) and the fan-out of what the vendor
cannot take in one call (list prompts, `n`), by the one planner (planner/plan.py)."""

from __future__ import annotations

from typing import Any

from pydantic import MISSING

from gateway.core.clearance import CLEAR, Clearance
from gateway.core.completion import DEFAULT_MAX_TOKENS, CompletionCall
from gateway.core.endpoint import Endpoint
from gateway.core.errors import invalid_field
from gateway.core.parameters import PARAMETERS
from gateway.planner import capabilities
from gateway.planner.plan import Plan, fan_out
from gateway.vendors.registry import Registry
from generated.models import CompletionRequest


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
    sent = emulation.vendor_call(call)
    return Plan(
        adapter=adapter,
        translator=translator,
        model=request.model,
        prompts=call.prompts,
        n=call.n,
        legs=fan_out(adapter, translator, sent, sent.n, max_vendor_calls),
        stream=call.stream,
        include_usage=bool(options and _value(options.include_usage)),
        user=call.user,
        emulation=emulation,
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


def _value(value: Any, default: Any = None) -> Any:
    """A request field's value, or `default` when it is absent or null (null means "not set")."""
    return default if value is MISSING or value is None else value


def _stop(value: Any) -> list[str]:
    value = _value(value)
    if value is None:
        return []
    root = value.root
    return [root] if isinstance(root, str) else [item.root for item in root]
