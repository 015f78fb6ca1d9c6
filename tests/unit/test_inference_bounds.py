"""The output bound a token budget reserves on /v5/inference (gateway/endpoints/inference/bounds.py):
each protocol's own member, times its choices; the 400 naming the member when a budget needs one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.completion import MAX_USAGE_TOKENS
from gateway.core.errors import BadRequest
from gateway.endpoints.inference.bounds import MAX_CHOICES, OutputBound, output_bound, reserved_output
from gateway.endpoints.inference.wires import WIRES, http_wire
from gateway.vendors.http_server.options import HttpServerOptions

TGI = http_wire(HttpServerOptions(path="/generate", output_bound="/parameters/max_new_tokens",
                                  output_bound_default=100))
BARE = http_wire(HttpServerOptions(path="/infer"))


@pytest.mark.parametrize(("wire", "args", "bound"), [
    (WIRES["anthropic"], {"max_tokens": 300, "thinking": {"type": "enabled", "budget_tokens": 200}},
     OutputBound(300, 300, 1, "args.max_tokens")),
    (WIRES["gemini"], {"generationConfig": {"maxOutputTokens": 64, "candidateCount": 2}},
     OutputBound(128, 64, 2, "args.generationConfig.maxOutputTokens")),
    (WIRES["openai"], {"max_completion_tokens": 50, "n": 3}, OutputBound(150, 50, 3, "args.max_completion_tokens")),
    (WIRES["openai"], {"max_tokens": 20}, OutputBound(20, 20, 1, "args.max_tokens")),
    (WIRES["openai"], {"max_tokens": 20, "max_completion_tokens": 30},
     OutputBound(30, 30, 1, "args.max_completion_tokens")),
    (WIRES["local"], {"n_predict": 0}, OutputBound(0, 0, 1, "args.n_predict")),
    (TGI, {"parameters": {"max_new_tokens": 7}}, OutputBound(7, 7, 1, "args.parameters.max_new_tokens")),
    (TGI, {"inputs": "x"}, OutputBound(100, 100, 1, None)),
], ids=["anthropic", "gemini", "openai", "openai-legacy", "openai-both", "llama.cpp", "http", "http-default"])
def test_the_protocols_own_member_bounds_the_output(wire, args, bound):
    assert output_bound(wire, args, vendor="v") == bound
    assert reserved_output(wire, args, vendor="v") == bound


@pytest.mark.parametrize(("wire", "args", "param"), [
    (WIRES["anthropic"], {}, "args.max_tokens"),
    (WIRES["gemini"], {"generationConfig": {"temperature": 0}}, "args.generationConfig.maxOutputTokens"),
    (WIRES["openai"], {"max_tokens": None}, "args.max_completion_tokens"),
    (WIRES["local"], {"n_predict": -1}, "args.n_predict"),  # llama.cpp: -1 is unbounded
])
def test_a_budgeted_request_without_a_bound_is_a_400_naming_the_member_to_set(wire, args, param):
    assert output_bound(wire, args, vendor="v") is None
    with pytest.raises(BadRequest) as caught:
        reserved_output(wire, args, vendor="acme")
    assert (caught.value.code, caught.value.param, caught.value.vendor) == ("output_bound_required", param, "acme")
    assert param in caught.value.message


def test_an_http_vendor_that_names_no_bound_cannot_admit_a_budgeted_request():
    with pytest.raises(BadRequest) as caught:
        reserved_output(BARE, {"max_new_tokens": 5}, vendor="triton")
    assert caught.value.code == "output_bound_required" and "output_bound" in caught.value.message


@pytest.mark.parametrize(("wire", "args", "param"), [
    (WIRES["anthropic"], {"max_tokens": "300"}, "args.max_tokens"),
    (WIRES["anthropic"], {"max_tokens": 12.0}, "args.max_tokens"),
    (WIRES["anthropic"], {"max_tokens": True}, "args.max_tokens"),
    (WIRES["openai"], {"max_tokens": -5}, "args.max_tokens"),
    (WIRES["openai"], {"max_tokens": 5, "n": 0}, "args.n"),
    (WIRES["openai"], {"max_tokens": 5, "n": MAX_CHOICES + 1}, "args.n"),
    (WIRES["gemini"], {"generationConfig": {"maxOutputTokens": MAX_USAGE_TOKENS + 1}},
     "args.generationConfig.maxOutputTokens"),
    (TGI, {"parameters": {"max_new_tokens": [1]}}, "args.parameters.max_new_tokens"),
])
def test_a_bound_that_is_not_a_count_is_refused_naming_it(wire, args, param):
    with pytest.raises(BadRequest) as caught:
        output_bound(wire, args, vendor="v")
    assert (caught.value.code, caught.value.param) == ("invalid_output_bound", param)


_values = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=4) | \
    st.lists(st.integers(), max_size=2)


@settings(max_examples=400, deadline=None)
@given(wire=st.sampled_from([*WIRES.values(), TGI]), bound=_values, choices=_values,
       where=st.sampled_from(["max_tokens", "max_completion_tokens", "n_predict", "n"]))
def test_a_bound_is_a_count_within_range_or_a_400(wire, bound, choices, where):
    args = {where: bound, "n": choices, "generationConfig": {"maxOutputTokens": bound, "candidateCount": choices},
            "parameters": {"max_new_tokens": bound}}
    try:
        found = output_bound(wire, args, vendor="v")
    except BadRequest as refused:
        assert refused.code == "invalid_output_bound" and refused.param
        return
    if found is not None:
        assert type(found.tokens) is int and 0 <= found.tokens <= MAX_USAGE_TOKENS * MAX_CHOICES
        assert found.tokens == found.per_choice * found.choices
