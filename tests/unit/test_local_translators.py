"""vendors/local/completions.py and chat.py, property-based (hypothesis), against a scripted
stand-in for llama.cpp's engine (tests/support/translators.py): from a call to the engine's
requests, one per choice, carrying the call's max tokens (within the context), stop sequences,
temperature and seed (seed + i per choice) exactly; and from the engine's chunks to what the client
reads, which the contract's generated models take, with text and usage carried exactly (summed over
the choices' requests) and finish reasons mapped into the contract's enum."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.chat import ChatCall
from gateway.core.completion import CompletionCall
from gateway.core.endpoint import Endpoint
from gateway.vendors.local.engine import engine_seed
from tests.support.translators import client_chat, client_completion, client_stream, finishes_read, joined, run_local

SOME = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONTEXT = 512  # the stand-in engine's context size
TEXT = st.text(max_size=16)
STOP = st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4)
COUNT = st.integers(0, 10**5)
CHAT_FINISH = {"stop": "stop", "length": "length", "content_filter": "content_filter", "eos": "stop"}
COMPLETION_FINISH = {"stop": "stop", "length": "length", "content_filter": "content_filter", "tool_calls": "stop",
                     "eos": "stop"}  # fmt: skip


def chat_script(pieces: list[str], finish: str, prompt: int, completion: int):
    def script(body: dict[str, Any]) -> list[dict[str, Any]]:
        chunks = [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        chunks.append({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})
        return chunks
    return script


def completion_script(pieces: list[str], finish: str, prompt: int, completion: int):
    def script(body: dict[str, Any]) -> list[dict[str, Any]]:
        chunks: list[dict[str, Any]] = [{"choices": [{"text": p, "finish_reason": None}]} for p in pieces]
        chunks.append({"choices": [{"text": "", "finish_reason": finish}],
                       "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})
        return chunks
    return script


@SOME
@given(max_tokens=st.none() | st.integers(1, 4096), which=st.sampled_from(["max_tokens", "max_completion_tokens"]),
       stop=st.none() | STOP, temperature=st.none() | st.floats(0, 2), seed=st.none() | st.integers(0, 2**31),
       n=st.integers(1, 3), stream=st.booleans())
def test_a_chat_call_is_one_engine_request_per_choice_carrying_its_values(max_tokens, which, stop, temperature,
                                                                          seed, n, stream):
    given_ = {which: max_tokens, "stop": stop, "temperature": temperature, "seed": seed, "n": n if n > 1 else None}
    parameters = {name: value for name, value in given_.items() if value is not None}
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    bodies, _ = run_local(Endpoint.CHAT, ChatCall("m", messages, parameters, stream=stream),
                          chat_script(["a"], "stop", 1, 1))
    assert len(bodies) == n
    for i, body in enumerate(sorted(bodies, key=lambda b: b.get("seed", 0))):
        assert body["messages"] == messages
        assert body["max_tokens"] == min(max_tokens or CONTEXT, CONTEXT)
        assert body.get("stop") == stop
        assert body["temperature"] == (1.0 if temperature is None else temperature)
        if seed is not None:
            assert sorted(b["seed"] for b in bodies) == sorted(engine_seed(seed + j) for j in range(n))
        else:
            assert "seed" not in body


@SOME
@given(pieces=st.lists(TEXT, max_size=4), finish=st.sampled_from(sorted(CHAT_FINISH)), n=st.integers(1, 3),
       prompt=COUNT, completion=COUNT, stream=st.booleans())
def test_engine_chunks_reach_the_chat_client_as_the_contract_says(pieces, finish, n, prompt, completion, stream):
    call = ChatCall("m", [{"role": "user", "content": "hi"}], {"n": n} if n > 1 else {}, stream=stream)
    _, read = run_local(Endpoint.CHAT, call, chat_script(pieces, finish, prompt, completion))
    if stream:
        text, finishes, usage = joined(read)
        assert text == {i: "".join(pieces) for i in range(n)}
        assert all(finishes[i] == CHAT_FINISH[finish] for i in range(n))
        assert finishes_read(client_stream(Endpoint.CHAT, read)) == {i: [CHAT_FINISH[finish]] for i in range(n)}
    else:
        client = client_chat(read)
        assert [(c.index, c.message.content or "", c.finish_reason) for c in client.choices] == \
            [(i, "".join(pieces), CHAT_FINISH[finish]) for i in range(n)]
        usage = read.usage
    # Each choice is its own engine request: its conversation counted once, its tokens for each.
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (prompt, completion * n)


@SOME
@given(prompt=TEXT, max_tokens=st.integers(1, CONTEXT // 2), stop=st.lists(st.text(min_size=1, max_size=8), max_size=4),
       temperature=st.none() | st.floats(0, 2), n=st.integers(1, 3), stream=st.booleans())
def test_a_completion_call_is_one_engine_request_per_choice_carrying_its_values(prompt, max_tokens, stop,
                                                                                temperature, n, stream):
    call = CompletionCall("m", [prompt], max_tokens=max_tokens, stop=stop, temperature=temperature, n=n,
                          stream=stream)
    bodies, _ = run_local(Endpoint.COMPLETIONS, call, completion_script(["a"], "stop", 1, 1))
    assert len(bodies) == n
    for body in bodies:
        assert body["prompt"] == (prompt or body["prompt"])  # an empty prompt: the start-of-text token
        assert body["max_tokens"] == max_tokens and body.get("stop", []) == stop
        assert body["temperature"] == (1.0 if temperature is None else temperature)


@SOME
@given(pieces=st.lists(TEXT, max_size=4), finish=st.sampled_from(sorted(COMPLETION_FINISH)), n=st.integers(1, 3),
       prompt=COUNT, completion=COUNT, stream=st.booleans())
def test_engine_chunks_reach_the_completions_client_as_the_contract_says(pieces, finish, n, prompt, completion,
                                                                         stream):
    call = CompletionCall("m", ["p"], n=n, stream=stream)
    _, read = run_local(Endpoint.COMPLETIONS, call, completion_script(pieces, finish, prompt, completion))
    if stream:
        text, finishes, usage = joined(read)
        assert text == {i: "".join(pieces) for i in range(n)}
        assert all(finishes[i] == COMPLETION_FINISH[finish] for i in range(n))
        assert finishes_read(client_stream(Endpoint.COMPLETIONS, read)) == \
            {i: [COMPLETION_FINISH[finish]] for i in range(n)}
    else:
        client = client_completion(read)
        assert [(c.index, c.text, c.finish_reason) for c in client.choices] == \
            [(i, "".join(pieces), COMPLETION_FINISH[finish]) for i in range(n)]
        usage = read.usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (prompt, completion * n)
