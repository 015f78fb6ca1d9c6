"""vendors/openai/completions.py and chat.py, property-based (hypothesis), for OpenAI and each
OpenAI-compatible server it knows: from a call to the server's request, which the fakes' own wire
checks take (tests/support/fakes/: OpenAI's chat wire, each server profile's fields) and which
carries the call's values exactly; and from the server's answer to what the client reads, which
the contract's generated models take, with text, tool calls and usage carried exactly and finish
reasons mapped into the contract's enum."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.chat import ChatCall
from gateway.core.completion import MAX_USAGE_TOKENS, CompletionCall
from gateway.core.endpoint import Endpoint
from gateway.core.errors import VendorFailed
from gateway.vendors.openai import servers
from gateway.vendors.openai.chat import chat_capabilities
from gateway.vendors.openai.completions import capabilities
from tests.support.fakes import openai_chat_upstream, server_profiles
from tests.support.translators import (NAME, chat_parameters, client_chat, client_completion, client_stream,
                                       finishes_read, joined, run_http, sse)

SOME = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SERVERS = ["openai", "llama.cpp", "vllm", "sglang", "ollama", "unidentified"]
TEXT = st.text(max_size=24)
COUNT = st.integers(0, 10**6)
# A count no vendor can mean: negative, past the most one call can use (core/completion.py
# MAX_USAGE_TOKENS), a fraction, not a number.
BAD_COUNT = st.one_of(st.integers(max_value=-1), st.integers(min_value=MAX_USAGE_TOKENS + 1, max_value=2**70),
                      st.floats(0.5, 10**6).filter(lambda f: not f.is_integer()), st.text(max_size=3), st.booleans())
CONTRACT_CHAT_FINISH = {"stop", "length", "tool_calls", "content_filter", "function_call"}
VENDOR_FINISH = st.sampled_from(["stop", "length", "tool_calls", "content_filter", "function_call", "eos", "weird"])


def served(server: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """What of `parameters` the planner lets through to `server` (the rest it refuses by name)."""
    caps = chat_capabilities(servers.SERVERS[server], frozenset())
    return {name: value for name, value in parameters.items() if caps[name].kind == "native"}


@SOME
@given(server=st.sampled_from(SERVERS), model=NAME, parameters=chat_parameters(), stream=st.booleans())
def test_a_chat_call_is_a_request_the_server_takes_carrying_its_values(server, model, parameters, stream):
    parameters = served(server, parameters)
    call = ChatCall(model, [{"role": "user", "content": "hi"}], parameters, stream=stream)
    answer = sse([{"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 0}}]) if stream else \
        {"choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}]}
    (sent,), _ = run_http("openai", Endpoint.CHAT, call, answer, {"server": server})
    body = sent.body
    assert sent.url.path == "/chat/completions"
    assert openai_chat_upstream.wire_problem(body) is None
    assert server_profiles.PROFILES[server].unknown("chat", body) == []
    assert body["model"] == model and body["messages"] == call.messages
    names = servers.SERVERS[server].chat_names  # (Ollama's max_tokens for max_completion_tokens)
    assert {name: body[names.get(name, name)] for name in parameters} == parameters


@pytest.mark.parametrize("server", ["ollama", "unidentified"])
def test_max_completion_tokens_goes_to_a_server_that_lacks_it_as_max_tokens(server):
    """Ollama's chat takes `max_tokens` alone (its documented fields), the same bound under its
    older name; a server the gateway could not identify may be Ollama."""
    assert chat_capabilities(servers.SERVERS[server], frozenset())["max_completion_tokens"].kind == "native"
    call = ChatCall("m", [{"role": "user", "content": "hi"}], {"max_completion_tokens": 7})
    answer = {"choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "length"}]}
    (sent,), _ = run_http("openai", Endpoint.CHAT, call, answer, {"server": server})
    assert sent.body["max_tokens"] == 7 and "max_completion_tokens" not in sent.body
    assert server_profiles.PROFILES[server].unknown("chat", sent.body) == []


def present(value: Any, absent: Any) -> Any:
    """A generated model's field, or `absent` when it is null or not given (pydantic's MISSING)."""
    return value if isinstance(value, type(absent)) else absent


@st.composite
def tool_calls(draw) -> list[dict[str, Any]]:
    return [{"id": draw(NAME), "type": "function", "function": {"name": draw(NAME), "arguments": draw(TEXT)}}
            for _ in range(draw(st.integers(0, 3)))]


@SOME
@given(texts=st.lists(TEXT, min_size=1, max_size=3), calls=st.data(), finish=VENDOR_FINISH, prompt=COUNT,
       completion=COUNT)
def test_a_chat_answer_reaches_the_client_as_the_contract_says(texts, calls, finish, prompt, completion):
    made = [calls.draw(tool_calls()) for _ in texts]
    choices = [{"index": i, "message": {"role": "assistant", "content": text, "tool_calls": made[i] or None},
                "finish_reason": finish} for i, text in enumerate(texts)]
    answer = {"choices": choices, "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}
    call = ChatCall("m", [{"role": "user", "content": "hi"}], {"n": len(texts)} if len(texts) > 1 else {})
    _, result = run_http("openai", Endpoint.CHAT, call, answer, {"server": "openai"})
    client = client_chat(result)
    for i, choice in enumerate(client.choices):
        assert choice.index == i
        assert present(choice.message.content, "") == texts[i]
        assert [c.model_dump(mode="json", exclude_unset=True) for c in present(choice.message.tool_calls, [])] == made[i]
        assert choice.finish_reason == (finish if finish in CONTRACT_CHAT_FINISH else "stop")
    usage = client.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (prompt, completion,
                                                                                   prompt + completion)


@SOME
@given(pieces=st.lists(TEXT, min_size=1, max_size=6), calls=tool_calls(), finish=VENDOR_FINISH, prompt=COUNT,
       completion=COUNT)
def test_a_chat_stream_carries_its_text_tool_calls_and_usage(pieces, calls, finish, prompt, completion):
    events: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
                                    for p in pieces]
    for i, tool in enumerate(calls):  # a call's id and name in its first piece, its arguments after
        events.append({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": tool["id"], "type": "function", "function": {"name": tool["function"]["name"]}}]}}]})
        events.append({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "function": {"arguments": tool["function"]["arguments"]}}]}}]})
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    events.append({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})
    call = ChatCall("m", [{"role": "user", "content": "hi"}], {}, stream=True)
    _, chunks = run_http("openai", Endpoint.CHAT, call, sse(events), {"server": "openai"})
    text, finishes, usage = joined(chunks)
    assert text.get(0, "") == "".join(pieces)
    assert finishes[0] == (finish if finish in CONTRACT_CHAT_FINISH else "stop")
    assert finishes_read(client_stream(Endpoint.CHAT, chunks)) == {0: [finishes[0]]}
    streamed = [t for chunk in chunks for c in chunk.choices for t in c.tool_calls or ()]
    assert [(t["id"], t["function"]["name"]) for t in streamed if "id" in t] == \
        [(t["id"], t["function"]["name"]) for t in calls]
    assert ["".join(t["function"].get("arguments", "") for t in streamed if t["index"] == i)
            for i in range(len(calls))] == [t["function"]["arguments"] for t in calls]
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (prompt, completion)


@SOME
@given(server=st.sampled_from(SERVERS), model=NAME, prompt=TEXT, max_tokens=st.integers(1, 4096),
       stop=st.lists(st.text(min_size=1, max_size=8), max_size=4), temperature=st.none() | st.floats(0, 2),
       stream=st.booleans())
def test_a_completion_call_is_a_request_the_server_takes_carrying_its_values(server, model, prompt, max_tokens,
                                                                            stop, temperature, stream):
    caps = capabilities(servers.OpenAIOptions(server=server))
    assert caps["stop"].kind == caps["temperature"].kind == "native"
    call = CompletionCall(model, [prompt], max_tokens=max_tokens, stop=stop, temperature=temperature, stream=stream)
    answer = sse([{"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 0}}]) if stream else \
        {"choices": [{"index": 0, "text": "x", "finish_reason": "stop"}]}
    (sent,), _ = run_http("openai", Endpoint.COMPLETIONS, call, answer, {"server": server})
    body = sent.body
    assert sent.url.path == "/completions"
    assert server_profiles.PROFILES[server].unknown("completions", body) == []
    assert (body["model"], body["prompt"], body["max_tokens"]) == (model, prompt, max_tokens)
    assert body.get("stop", []) == stop and body.get("temperature") == temperature
    assert body.get("stream_options") == ({"include_usage": True} if stream else None)


@SOME
@given(texts=st.lists(TEXT, min_size=1, max_size=3),
       finish=st.sampled_from(["stop", "length", "content_filter", "tool_calls", "eos"]), prompt=COUNT,
       completion=COUNT, stream=st.booleans())
def test_a_completion_reaches_the_client_as_the_contract_says(texts, finish, prompt, completion, stream):
    call = CompletionCall("m", ["p"], n=len(texts), stream=stream)
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    if stream:
        answer = sse([{"choices": [{"index": i, "text": t, "finish_reason": finish}]} for i, t in enumerate(texts)]
                     + [{"choices": [], "usage": usage}])
    else:
        answer = {"choices": [{"index": i, "text": t, "finish_reason": finish} for i, t in enumerate(texts)],
                  "usage": usage}
    _, read = run_http("openai", Endpoint.COMPLETIONS, call, answer, {"server": "openai"})
    mapped = finish if finish in ("stop", "length", "content_filter") else "stop"
    if stream:
        text, finishes, got = joined(read)
        assert text == dict(enumerate(texts)) and set(finishes.values()) == {mapped}
        assert finishes_read(client_stream(Endpoint.COMPLETIONS, read)) == {i: [mapped] for i in range(len(texts))}
        assert got is not None and (got.prompt_tokens, got.completion_tokens) == (prompt, completion)
        return
    client = client_completion(read)
    assert [(c.index, c.text, c.finish_reason) for c in client.choices] == [(i, t, mapped) for i, t in enumerate(texts)]
    assert (client.usage.prompt_tokens, client.usage.completion_tokens, client.usage.total_tokens) == \
        (prompt, completion, prompt + completion)


@SOME
@given(count=BAD_COUNT, side=st.sampled_from(["prompt_tokens", "completion_tokens"]), chat=st.booleans())
def test_a_usage_out_of_bounds_is_the_vendors_failure_never_billed(count, side, chat):
    usage = {"prompt_tokens": 1, "completion_tokens": 1, side: count}
    if chat:
        call: Any = ChatCall("m", [{"role": "user", "content": "hi"}])
        answer = {"choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}], "usage": usage}
    else:
        call = CompletionCall("m", ["p"])
        answer = {"choices": [{"index": 0, "text": "x", "finish_reason": "stop"}], "usage": usage}
    with pytest.raises(VendorFailed):
        run_http("openai", Endpoint.CHAT if chat else Endpoint.COMPLETIONS, call, answer, {"server": "openai"})
