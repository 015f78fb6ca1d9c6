"""The fuzz runs' own judge (tests/contract/fuzz_checks.py, fuzz_steer.py): which refusals of a valid
request the capability map allows each protocol's vendor, and that the cases steered to be served ask
for none of them."""

from __future__ import annotations

import copy

import pytest

from tests.contract.fuzz import TARGETS
from tests.contract.fuzz_checks import refusable
from tests.contract.fuzz_steer import servable, steer, steer_chat
from tests.contract.fuzz_vendor import Vendor

EVERYTHING = {"prompt": ["a", "b"], "n": 2, "best_of": 3, "echo": True, "frequency_penalty": 0.5,
              "presence_penalty": -0.5, "logit_bias": {"7": 5}, "logprobs": 2, "max_tokens": 3, "seed": 2**40,
              "stop": ["x"], "suffix": "!", "temperature": 1.5, "top_p": 0.9, "user": "u"}


def vendor(protocol: str) -> Vendor:
    return Vendor.of(TARGETS[protocol].vendor)


@pytest.mark.parametrize(("protocol", "allowed"), [
    ("openai", {}),
    # echo is emulated, so not together with logprobs (the vendor cannot score the prompt), on both.
    ("anthropic", {"best_of": "unsupported_parameter", "echo": "unsupported_parameter",
                   "frequency_penalty": "unsupported_parameter", "presence_penalty": "unsupported_parameter",
                   "logit_bias": "unsupported_parameter", "logprobs": "unsupported_parameter",
                   "seed": "unsupported_parameter", "suffix": "unsupported_parameter",
                   "temperature": "parameter_out_of_range"}),
    ("gemini", {"echo": "unsupported_parameter", "logit_bias": "unsupported_parameter",
                "suffix": "unsupported_parameter"}),
    ("local", {"suffix": "unsupported_parameter"}),
])
def test_what_each_vendor_may_refuse_comes_from_its_capability_map(protocol, allowed):
    assert refusable({"model": "x/y", **EVERYTHING}, vendor(protocol)) == allowed


@pytest.mark.parametrize("protocol", list(TARGETS))
def test_a_servable_case_asks_for_nothing_the_vendor_may_refuse(protocol):
    body = {"model": "x/y", **EVERYTHING}
    servable(body, vendor(protocol))
    assert refusable(body, vendor(protocol)) == {}


def test_the_refusals_the_issue_saw_on_local_are_not_allowed():
    """The empty prompt, a best_of equal to n: valid requests local must serve (no 400 passes)."""
    local = vendor("local")
    for body in ({"prompt": ""}, {"prompt": ["fine", ""]}, {"prompt": "x", "n": 3, "best_of": 3}):
        assert refusable({"model": "local/m", **body}, local) == {}


@pytest.mark.parametrize("protocol", list(TARGETS))
def test_steered_cases_keep_within_the_limits(protocol):
    target = vendor(protocol)
    body = {"model": "any/model", **copy.deepcopy(EVERYTHING), "prompt": ["p" * 100] * 40, "n": 128, "best_of": 20,
            "max_tokens": 2**31 - 1, "logit_bias": {"9999999": 1}}
    steer(body, target)
    limits = target.limits
    assert body["model"] == target.model
    assert len(body["prompt"]) <= limits["prompts"]
    assert len(body["prompt"]) * max(body["n"], body.get("best_of") or 0) <= limits["choices"]
    assert body.get("best_of") is None or body["best_of"] >= body["n"]
    if "max_tokens" in limits:
        assert body["max_tokens"] <= limits["max_tokens"]
        assert all(len(p) <= limits["scored_prompt_chars"] for p in body["prompt"])  # echo with logprobs
        assert all(int(k) < limits["vocabulary"] for k in body.get("logit_bias", {}))


@pytest.mark.parametrize("protocol", list(TARGETS))
def test_steered_chat_cases_keep_within_the_limits(protocol):
    """Chat is fuzzed through every protocol: steered to the run's model, its choices within the limits,
    and for the real model short generations and short messages."""
    target = vendor(protocol)
    body = {"model": "any/model", "n": 128, "max_tokens": 2**31 - 1, "stream": True,
            "messages": [{"role": "user", "content": "m" * 500}, {"role": "assistant", "content": "a" * 500},
                         {"role": "user", "content": [{"type": "text", "text": "t" * 500}]}]}
    steer_chat(body, target)
    limits = target.limits
    assert body["model"] == target.model and body["n"] <= limits["choices"]
    assert body["max_tokens"] <= limits.get("max_tokens", limits["stream_max_tokens"])
    if "message_chars" in limits:
        assert len(body["messages"]) <= limits["messages"]
        assert all(len(m["content"]) <= limits["message_chars"] for m in body["messages"])


def test_a_chat_case_without_a_length_gets_a_short_one_on_the_real_model():
    body = {"model": "x/y", "messages": [{"role": "user", "content": "hello there"}]}
    steer_chat(body, vendor("local"))
    assert body["max_completion_tokens"] == 2 and body["messages"][0]["content"] == "hello th"
