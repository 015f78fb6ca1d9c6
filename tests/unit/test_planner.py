"""The planner in-process, against a scripted adapter: fan-out and prompt-major indexing, seeds per
choice, usage totals, best_of ranking, the per-request call bound, capability checks and the
fallback policy. (tests/integration/test_emulation.py and the vendor tests cover the same through real HTTP.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest

from gateway.core.clearance import CLEAR
from gateway.core.completion import Attempt, Choice, Chunk, CompletionCall, Result, Usage
from gateway.core.endpoint import Endpoint
from gateway.core.errors import BadRequest, ParameterOutOfRange, UnsupportedParameter, VendorFailed
from gateway.core.parameters import PARAMETERS, Capabilities, Range, Support, emulated, native, unsupported
from gateway.endpoints.completions.unit import UNIT
from gateway.endpoints.unit import Planning
from gateway.planner import fallbacks
from gateway.endpoints.completions import plan as completions_plan
from gateway.planner import plan as planning
from gateway.vendors.registry import Registry
from generated.models import CompletionRequest


class Scripted:
    """An adapter that answers every call with one choice per prompt and n, text naming the call,
    logprobs from the seed, and usage of 10 prompt tokens per prompt and 1 per choice."""

    protocol: ClassVar[str] = "scripted"

    def __init__(self, name: str, support: dict[str, Support], fail: Exception | None = None) -> None:
        self.name = name
        self.capabilities = Capabilities("scripted", {p: native() for p in PARAMETERS} | support)
        self.translators = {Endpoint.COMPLETIONS: self}  # its own completions translator
        self.calls: list[CompletionCall] = []
        self.fail = fail

    async def complete(self, call: CompletionCall) -> Result:
        self.calls.append(call)
        if self.fail is not None:
            raise self.fail
        return Result(self._choices(call), Usage(10 * len(call.prompts), len(call.prompts) * call.n))

    async def stream(self, call: CompletionCall) -> AsyncIterator[list[Chunk]]:
        self.calls.append(call)
        if self.fail is not None:
            raise self.fail
        for choice in self._choices(call):
            yield [Chunk([choice])]
        yield [Chunk([], Usage(10 * len(call.prompts), len(call.prompts) * call.n))]

    def _choices(self, call: CompletionCall) -> list[Choice]:
        choices = []
        for p, prompt in enumerate(call.prompts):
            for i in range(call.n):
                seed = (call.seed or 0) + i
                logprobs = {"tokens": ["t"], "token_logprobs": [-float(seed)], "top_logprobs": [None],
                            "text_offset": [0]}
                choices.append(Choice(p * call.n + i, f"{prompt}#{seed}", "stop", logprobs))
        return choices


def request(**body: Any) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "v/m", "prompt": "p", **body})


def plan_for(adapter: Scripted, max_calls: int = 64, **body: Any) -> planning.Plan:
    return completions_plan.plan(request(**body), Registry({adapter.name: adapter}), max_calls)  # type: ignore[dict-item]


def test_list_prompts_and_n_fan_out_prompt_major_with_seed_plus_i_and_usage_per_prompt():
    adapter = Scripted("v", {"prompt": emulated(), "n": emulated()})
    plan = plan_for(adapter, prompt=["a", "b"], n=2, seed=5)
    result = asyncio.run(planning.complete(plan))
    assert len(adapter.calls) == 4 and all(len(c.prompts) == 1 and c.n == 1 for c in adapter.calls)
    assert [(c.index, c.text) for c in result.choices] == [(0, "a#5"), (1, "a#6"), (2, "b#5"), (3, "b#6")]
    # The client is told each prompt once (OpenAI's semantics); the ledger gets what the 4 calls billed.
    assert result.usage is not None and (result.usage.prompt_tokens, result.usage.completion_tokens) == (20, 4)
    assert result.billed is not None and (result.billed.prompt_tokens, result.billed.completion_tokens) == (40, 4)


def test_a_vendor_taking_n_per_call_gets_the_choices_in_as_few_calls_as_its_limit_allows():
    adapter = Scripted("v", {"n": native(per_call=3)})
    plan = plan_for(adapter, n=7, seed=0)
    asyncio.run(planning.complete(plan))
    assert [(c.n, c.seed) for c in adapter.calls] == [(3, 0), (3, 3), (1, 6)]


def test_a_stream_is_reindexed_across_legs_and_ends_with_the_summed_usage():
    adapter = Scripted("v", {"prompt": emulated()})

    async def chunks() -> list[Chunk]:
        return [chunk async for chunks in planning.stream(plan_for(adapter, prompt=["a", "b"], n=2, stream=True))
                for chunk in chunks]

    got = asyncio.run(chunks())
    texts = {c.index: c.text for chunk in got for c in chunk.choices}
    assert texts == {0: "a#0", 1: "a#1", 2: "b#0", 3: "b#1"}
    assert got[-1].choices == [] and got[-1].usage is not None and got[-1].usage.total_tokens == 24


def test_best_of_is_ranked_by_the_gateway_when_emulated_and_every_candidate_is_billed():
    adapter = Scripted("v", {"best_of": emulated(), "n": emulated()})
    plan = plan_for(adapter, best_of=4, n=2, seed=1)
    result = asyncio.run(planning.complete(plan))
    assert len(adapter.calls) == 4 and all(c.best_of is None for c in adapter.calls)
    # Candidate i has logprob -(1 + i): the first two are best, in that order, re-indexed.
    assert [(c.index, c.text) for c in result.choices] == [(0, "p#1"), (1, "p#2")]
    assert all(c.logprobs is None for c in result.choices)  # the client did not ask for logprobs
    assert result.usage is not None and result.usage.completion_tokens == 4


def test_a_request_needing_more_vendor_calls_than_allowed_is_refused_before_any_call():
    adapter = Scripted("v", {"n": emulated()})
    with pytest.raises(BadRequest) as refused:
        plan_for(adapter, max_calls=3, n=4)
    assert refused.value.code == "too_many_vendor_calls" and adapter.calls == []


def test_unsupported_and_out_of_range_values_name_parameter_and_vendor():
    adapter = Scripted("v", {"suffix": unsupported("no infill"), "temperature": native(range=Range(0, 1))})
    with pytest.raises(UnsupportedParameter) as refused:
        plan_for(adapter, suffix="x")
    assert (refused.value.param, refused.value.vendor) == ("suffix", "v") and "no infill" in refused.value.message
    with pytest.raises(ParameterOutOfRange) as out:
        plan_for(adapter, temperature=1.5)
    assert (out.value.param, out.value.vendor) == ("temperature", "v")
    plan_for(adapter, temperature=1.0)  # the edge is inside


def test_emulated_best_of_needs_native_logprobs():
    adapter = Scripted("v", {"best_of": emulated(), "logprobs": unsupported("none")})
    with pytest.raises(UnsupportedParameter, match="ranking candidates needs token logprobs"):
        plan_for(adapter, best_of=2)


def test_the_attempt_records_the_clients_user_even_when_the_vendor_does_not_take_it():
    adapter = Scripted("v", {"user": emulated(), "prompt": emulated()})
    plan = plan_for(adapter, user="alice", prompt=["a", "b"])
    assert all(leg.call.user is None for leg in plan.legs)  # not sent
    attempt = plan.attempt()
    assert (attempt.vendor, attempt.model, attempt.end_user, attempt.prompts_sent) == ("v", "v/m", "alice", ("a", "b"))


def start(registry: Registry, chain: dict[str, list[str]], **body: Any) -> tuple[fallbacks.Started, list[Attempt]]:
    attempts: list[Attempt] = []
    asked = request(**body)
    on = Planning(UNIT, asked, registry, 64, CLEAR)  # the completions unit re-plans a fallback
    started = asyncio.run(fallbacks.start(on.plan(asked.model), on, chain, attempts.append))
    return started, attempts


def test_a_vendor_failure_falls_back_along_the_chain_skipping_models_that_cannot_serve():
    broken = Scripted("v", {}, fail=VendorFailed("down", vendor="v"))
    picky = Scripted("picky", {"seed": unsupported("no seeds")})
    backup = Scripted("backup", {})
    registry = Registry({"v": broken, "picky": picky, "backup": backup})  # type: ignore[dict-item]
    started, attempts = start(registry, {"v/m": ["picky/m", "backup/m"]}, seed=3)
    assert started.plan.model == "backup/m" and started.result is not None
    assert [a.model for a in attempts] == ["v/m", "backup/m"] and picky.calls == []


def test_a_client_mistake_never_falls_back():
    rejecting = Scripted("v", {}, fail=BadRequest("bad prompt", vendor="v"))
    backup = Scripted("backup", {})
    registry = Registry({"v": rejecting, "backup": backup})  # type: ignore[dict-item]
    with pytest.raises(BadRequest):
        start(registry, {"v/m": ["backup/m"]})
    assert backup.calls == []


def test_when_no_fallback_serves_the_client_gets_the_first_models_error():
    first = VendorFailed("first down", vendor="v")
    registry = Registry({"v": Scripted("v", {}, fail=first),  # type: ignore[dict-item]
                         "w": Scripted("w", {}, fail=VendorFailed("second down", vendor="w"))})
    with pytest.raises(VendorFailed) as failed:
        start(registry, {"v/m": ["w/m"]})
    assert failed.value is first
