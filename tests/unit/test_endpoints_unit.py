"""gateway/endpoints/unit.py's reading of the contract's defaults: the request defaults are stated
once, in openapi.json, and read from the generated models for the cache's canonical form; a field
the client left out never becomes a value the planner carries to a vendor."""

from __future__ import annotations

import json

import pytest

from gateway.core.completion import DEFAULT_MAX_TOKENS
from gateway.endpoints import unit
from gateway.endpoints.chat import unit as chat
from gateway.endpoints.completions import unit as completions
from gateway.endpoints.completions.plan import completion_call
from tests.support.gateway_process import ROOT
from generated.models import ChatCompletionRequest, CompletionRequest

SCHEMAS = json.loads((ROOT / "openapi.json").read_text())["components"]["schemas"]


@pytest.mark.parametrize(("schema", "defaults"), [("CompletionRequest", completions.DEFAULTS),
                                                  ("ChatCompletionRequest", chat.DEFAULTS)])
def test_the_units_defaults_are_the_ones_the_contract_states(schema, defaults):
    stated = {name: field["default"] for name, field in SCHEMAS[schema]["properties"].items() if "default" in field}
    assert stated and defaults == stated
    assert DEFAULT_MAX_TOKENS == SCHEMAS["CompletionRequest"]["properties"]["max_tokens"]["default"]


def test_a_chat_field_left_out_is_not_a_value_given():
    request = ChatCompletionRequest.model_validate({"model": "v/m", "messages": [{"role": "user", "content": "x"}],
                                                    "top_p": 1, "seed": None})
    body = chat.UNIT.accepted(request).body
    assert set(body) == {"model", "messages", "top_p", "seed"}  # set by the client, a default's value or null
    assert not set(chat.DEFAULTS) - {"top_p"} & set(body)


def test_a_completion_field_left_out_is_not_sent():
    request = CompletionRequest.model_validate({"model": "v/m", "prompt": "x", "presence_penalty": 0.5})
    call = completion_call(request, "m")
    assert (call.temperature, call.top_p, call.frequency_penalty, call.presence_penalty) == (None, None, None, 0.5)
    assert (call.n, call.max_tokens, call.echo, call.stop, call.logit_bias) == (1, DEFAULT_MAX_TOKENS, False, [], None)
    assert [name for name in ("temperature", "top_p", "frequency_penalty", "n", "echo", "stop", "logit_bias")
            if call.given(name) is not None] == []


def test_given_keeps_what_the_client_set_even_when_it_is_the_default():
    request = CompletionRequest.model_validate({"model": "v/m", "prompt": "x", "temperature": 1})
    assert unit.given(request) == {"model": "v/m", "prompt": "x", "temperature": 1}
