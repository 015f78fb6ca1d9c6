"""endpoints/chat/plan.py and the planner (planner/plan.py) in-process, with a scripted chat adapter: how `n` is fanned out (calls,
seeds, indexes, the usage told and billed, what the ledger is told), what values that ask for
nothing do on a vendor lacking the parameter, and the adapter's own refusals."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.core.chat import ChatCall, ChatChoice
from gateway.core.completion import Chunk, Result, Usage
from gateway.core.endpoint import Endpoint
from gateway.core.errors import BadRequest, UnsupportedParameter
from gateway.core.parameters import CHAT_PARAMETERS, Capabilities, Support, emulated, native, unsupported
from gateway.endpoints.chat.plan import plan_chat
from gateway.vendors.registry import Registry

USER = [{"role": "user", "content": "hello there"}]


class ScriptedChat:
    """An adapter that is its own chat translator: answers each call with its n choices ("<seed>#<i>"), usage 10 prompt tokens and 1 per choice."""

    def __init__(self, support: dict[str, Support], refuses: tuple[str, str] | None = None) -> None:
        self.name = "v"
        self.capabilities = Capabilities.chat("scripted", {p: native() for p in CHAT_PARAMETERS} | support)
        self.translators = {Endpoint.CHAT: self}  # its own chat translator
        self.calls: list[ChatCall] = []
        self._refuses = refuses

    def refused(self, call: ChatCall) -> tuple[str, str] | None:
        return self._refuses

    def _choices(self, call: ChatCall) -> list[ChatChoice]:
        return [ChatChoice(i, f"{call.parameters.get('seed')}#{i}", "stop") for i in range(call.n)]

    async def complete(self, call: ChatCall) -> Result:
        self.calls.append(call)
        return Result(self._choices(call), Usage(10, call.n))

    async def stream(self, call: ChatCall) -> AsyncIterator[list[Chunk]]:
        self.calls.append(call)
        for choice in self._choices(call):
            yield [Chunk([choice])]
        yield [Chunk([], Usage(10, call.n))]


def plan(adapter: ScriptedChat, max_calls: int | None = None, **body: Any):
    return plan_chat({"model": "v/m", "messages": USER, **body}, Registry({"v": adapter}), max_calls)  # type: ignore[dict-item]


def test_an_emulated_n_is_one_call_per_choice_billed_per_call():
    adapter = ScriptedChat({"n": emulated()})
    planned = plan(adapter, n=3, max_tokens=5)
    result = asyncio.run(planned.complete())
    assert [(c.index, c.text) for c in result.choices] == [(0, "None#0"), (1, "None#0"), (2, "None#0")]
    assert all("n" not in call.parameters for call in adapter.calls) and len(adapter.calls) == 3
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (10, 3)  # the conversation once
    assert (result.billed.prompt_tokens, result.billed.completion_tokens) == (30, 3)  # every call's
    attempt = planned.attempt()
    assert (attempt.vendor_calls, len(attempt.prompts_sent), attempt.max_completion_tokens) == (3, 3, 15)
    assert planned.n == 3 and planned.vendor_calls == 3


def test_n_beyond_the_choices_per_call_is_split_with_seed_plus_i():
    adapter = ScriptedChat({"n": native(per_call=2)})
    result = asyncio.run(plan(adapter, n=5, seed=10).complete())
    assert sorted((c.parameters.get("n", 1), c.parameters["seed"]) for c in adapter.calls) == [(1, 14), (2, 10),
                                                                                              (2, 12)]
    assert [c.text for c in result.choices] == ["10#0", "10#1", "12#0", "12#1", "14#0"]
    assert [c.index for c in result.choices] == list(range(5))


def test_a_fanned_out_stream_renumbers_choices_and_ends_with_the_usage():
    async def read() -> list[Chunk]:
        return [chunk async for batch in plan(ScriptedChat({"n": emulated()}), n=2, stream=True).chunks()
                for chunk in batch]

    chunks = asyncio.run(read())
    assert sorted(c.index for chunk in chunks[:-1] for c in chunk.choices) == [0, 1]
    assert chunks[-1].choices == [] and (chunks[-1].usage.prompt_tokens, chunks[-1].billed.prompt_tokens) == (10, 20)


def test_one_call_is_not_fanned_out():
    adapter = ScriptedChat({"n": native(per_call=4)})
    planned = plan(adapter, n=4)
    assert len(planned.legs) == 1 and planned.vendor_calls == 1
    assert asyncio.run(planned.complete()).billed == Usage(10, 4)


def test_too_many_calls_are_refused():
    with pytest.raises(BadRequest) as refused:
        plan(ScriptedChat({"n": emulated()}), max_calls=2, n=3)
    assert refused.value.code == "too_many_vendor_calls" and refused.value.param == "n"


@pytest.mark.parametrize(("name", "value", "sent"), [
    ("response_format", {"type": "text"}, False),
    ("parallel_tool_calls", True, False),
    ("presence_penalty", 0, False),
    ("presence_penalty", 0.5, None),  # None: refused
    ("parallel_tool_calls", False, None),
])
def test_a_value_that_asks_for_nothing_needs_nothing_of_the_vendor(name, value, sent):
    adapter = ScriptedChat({name: unsupported("it has none")})
    if sent is None:
        with pytest.raises(UnsupportedParameter):
            plan(adapter, **{name: value})
        return
    assert name not in plan(adapter, **{name: value}).legs[0].call.parameters


def test_a_value_the_adapter_cannot_take_is_refused_by_name():
    with pytest.raises(UnsupportedParameter) as refused:
        plan(ScriptedChat({}, refuses=("messages", "no names")))
    assert refused.value.param == "messages" and "no names" in refused.value.message
