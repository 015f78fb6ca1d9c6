"""One source of truth for the request parameters: they come from the generated CompletionRequest,
every protocol declares exactly one support record for each, and a property added to the contract
fails every adapter (and the planner) loudly, by name, until it is declared."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import create_model

from gateway.core.endpoint import Endpoint
from gateway.core import parameters
from gateway.core.completion import CompletionCall
from gateway.core.parameters import (
    EMULATABLE,
    GATEWAY_FIELDS,
    PARAMETERS,
    Capabilities,
    IncompleteCapabilities,
    emulated,
    native,
    request_parameters,
    unsupported,
)
from gateway.planner.capabilities import EMULATIONS
from gateway.endpoints.completions.plan import completion_call
from gateway.vendors.registry import PROTOCOLS
from generated.models import CompletionRequest

# Each protocol with its default options and, where options change the declaration, others.
OPTION_VARIANTS = [(name, {}) for name in PROTOCOLS] + [
    ("openai", {"lacks": "prompt,n,echo,stop,best_of,user,logprobs", "max_stop": 2}),
    ("gemini", {"max_candidates": 8}),
]


def declared(protocol: str, options: dict) -> Capabilities:
    adapter = PROTOCOLS[protocol]
    return adapter.capabilities_of[Endpoint.COMPLETIONS](adapter.Options.model_validate(options))


def with_a_new_property() -> type[CompletionRequest]:
    """CompletionRequest as `make generate` would write it after a property was added to openapi.json."""
    return create_model("CompletionRequest", __base__=CompletionRequest, top_k=(int | None, None))


def test_the_parameters_are_the_generated_requests_fields_less_the_gateways_own():
    assert set(PARAMETERS) == set(CompletionRequest.model_fields) - GATEWAY_FIELDS
    assert PARAMETERS[0] == "prompt" and list(PARAMETERS[1:]) == sorted(PARAMETERS[1:])
    assert "top_k" in request_parameters(with_a_new_property())


@pytest.mark.parametrize(("protocol", "options"), OPTION_VARIANTS, ids=[f"{p}-{o}" for p, o in OPTION_VARIANTS])
def test_every_protocol_declares_every_parameter_exactly_once(protocol, options):
    caps = declared(protocol, options)
    assert set(caps.support) == set(PARAMETERS)
    for name, found in caps.support.items():
        assert found.kind in ("native", "emulated", "unsupported"), name
        if found.kind == "emulated":
            assert name in EMULATABLE
        if found.kind == "unsupported":
            assert found.detail, f"{protocol}: unsupported {name} says why"


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_a_property_added_to_the_contract_fails_every_adapter_naming_it(protocol, monkeypatch):
    monkeypatch.setattr(parameters, "PARAMETERS", request_parameters(with_a_new_property()))
    with pytest.raises(IncompleteCapabilities, match=r"request parameter\(s\) top_k"):
        declared(protocol, {})


def test_a_property_added_to_the_contract_fails_the_planner_naming_it(monkeypatch):
    extended = with_a_new_property()
    monkeypatch.setattr("gateway.endpoints.completions.plan.PARAMETERS", request_parameters(extended))
    request = extended.model_validate({"model": "x/m", "prompt": "p", "top_k": 5})
    with pytest.raises(TypeError, match="top_k"):
        completion_call(request, "m")


def test_the_vendor_call_carries_every_parameter():
    fields = {f.name for f in dataclasses.fields(CompletionCall)}
    assert set(PARAMETERS) - {"prompt"} <= fields and "prompts" in fields


def test_the_planner_describes_exactly_the_emulations_adapters_may_declare():
    assert set(EMULATIONS) == EMULATABLE


@pytest.mark.parametrize(
    ("support", "message"),
    [
        ({"logprobs": emulated()}, "cannot emulate 'logprobs'"),
        ({"seed": unsupported("")}, "unsupported 'seed' needs a reason"),
        ({"temperature": native(per_call=2)}, "'temperature' cannot have a per-call limit"),
        ({"n": native(per_call=0)}, "'n' cannot have a per-call limit of 0"),
        ({"nonsense": native()}, "unknown parameter"),
    ],
)
def test_a_declaration_the_gateway_cannot_honour_is_refused(support, message):
    complete = {name: native() for name in PARAMETERS}
    with pytest.raises(IncompleteCapabilities, match=message):
        Capabilities("test", complete | support)
