"""vendors/anthropic/completions.py and chat.py, property-based (hypothesis): from a call to the
Messages request, which the Anthropic fake's documented-shape check takes
(tests/support/fakes/anthropic_upstream.py) and which carries the call's model, max tokens, stop
sequences, temperature and tools exactly; and from a Message (whole or streamed) to what the client
reads, which the contract's generated models take, with text, tool calls (ids, names, input) and
usage carried exactly and stop reasons mapped into the contract's finish reasons."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.chat import DEFAULT_MAX_TOKENS, ChatCall
from gateway.core.completion import MAX_USAGE_TOKENS, CompletionCall
from gateway.core.endpoint import Endpoint
from gateway.core.errors import VendorFailed
from tests.support.fakes import anthropic_upstream
from tests.support.translators import (NAME, chat_parameters, client_chat, client_completion, client_stream,
                                       finishes_read, joined, run_http, sse)

SOME = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TEXT = st.text(max_size=24)
COUNT = st.integers(0, 10**6)
# A count no vendor can mean: negative, past the most one call can use (core/completion.py
# MAX_USAGE_TOKENS), a fraction, not a number.
BAD_COUNT = st.one_of(st.integers(max_value=-1), st.integers(min_value=MAX_USAGE_TOKENS + 1, max_value=2**70),
                      st.floats(0.5, 10**6).filter(lambda f: not f.is_integer()), st.text(max_size=3), st.booleans())
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                "refusal": "content_filter", "model_context_window_exceeded": "length", "pause_turn": "stop",
                "a_reason_added_later": "stop"}  # fmt: skip
INPUT = st.dictionaries(NAME, st.integers() | st.text(max_size=4), max_size=3)


def problems(sent) -> list[str]:
    return anthropic_upstream._problems(dict(sent.headers), sent.body)


MESSAGE = {"type": "message", "content": [{"type": "text", "text": "x"}], "stop_reason": "end_turn",
           "usage": {"input_tokens": 1, "output_tokens": 1}}
STOPPED = [{"type": "message_start", "message": {"usage": {"input_tokens": 1}}},
           {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
           {"type": "message_stop"}]


@SOME
@given(model=NAME, parameters=chat_parameters(temperature_max=1), stream=st.booleans())
def test_a_chat_call_is_a_messages_request_carrying_its_values(model, parameters, stream):
    call = ChatCall(model, [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
                    parameters, stream=stream)
    (sent,), _ = run_http("anthropic", Endpoint.CHAT, call, sse(STOPPED, named=True) if stream else MESSAGE)
    body = sent.body
    assert sent.url.path == "/v1/messages" and problems(sent) == []
    assert body["model"] == model and body["system"] == "be brief"
    assert body["max_tokens"] == (parameters.get("max_completion_tokens") or parameters.get("max_tokens")
                                  or DEFAULT_MAX_TOKENS)
    stop = parameters.get("stop")
    assert body.get("stop_sequences") == (None if stop is None else [stop] if isinstance(stop, str) else stop)
    assert body.get("temperature") == parameters.get("temperature")
    tools = parameters.get("tools") or []
    assert [t["name"] for t in body.get("tools", [])] == [t["function"]["name"] for t in tools]
    choice = parameters.get("tool_choice")
    if tools and isinstance(choice, dict):
        assert body["tool_choice"] == {"type": "tool", "name": choice["function"]["name"]}
    elif tools and choice == "required":
        assert body["tool_choice"] == {"type": "any"}
    assert body.get("stream", False) is stream


@st.composite
def tool_uses(draw) -> list[dict[str, Any]]:
    ids = draw(st.lists(NAME, max_size=3, unique=True))
    return [{"type": "tool_use", "id": i, "name": draw(NAME), "input": draw(INPUT)} for i in ids]


@SOME
@given(texts=st.lists(TEXT, max_size=3), tools=tool_uses(), stop=st.sampled_from(sorted(STOP_REASONS)),
       prompt=COUNT, completion=COUNT, cached=COUNT)
def test_a_message_reaches_the_chat_client_as_the_contract_says(texts, tools, stop, prompt, completion, cached):
    content = [{"type": "text", "text": t} for t in texts] + tools
    usage = {"input_tokens": prompt, "output_tokens": completion, "cache_read_input_tokens": cached}
    answer = {"type": "message", "content": content, "stop_reason": stop, "usage": usage}
    _, result = run_http("anthropic", Endpoint.CHAT, ChatCall("m", [{"role": "user", "content": "hi"}]), answer)
    (choice,) = client_chat(result).choices
    message = choice.message
    assert (message.content if isinstance(message.content, str) else "") == "".join(texts)
    calls = message.tool_calls if isinstance(message.tool_calls, list) else []
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls] == \
        [(t["id"], t["name"], t["input"]) for t in tools]
    assert choice.finish_reason == STOP_REASONS[stop]
    client = client_chat(result).usage
    assert (client.prompt_tokens, client.completion_tokens, client.total_tokens) == \
        (prompt + cached, completion, prompt + cached + completion)


@SOME
@given(pieces=st.lists(TEXT, max_size=4), tools=tool_uses(), stop=st.sampled_from(sorted(STOP_REASONS)),
       prompt=COUNT, completion=COUNT)
def test_a_message_stream_reaches_the_chat_client_exactly(pieces, tools, stop, prompt, completion):
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {"usage": {"input_tokens": prompt}}},
                                    {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}]
    events += [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
               for p in pieces]
    events.append({"type": "content_block_stop", "index": 0})
    for i, tool in enumerate(tools, start=1):
        arguments = json.dumps(tool["input"])
        events += [{"type": "content_block_start", "index": i,
                    "content_block": {"type": "tool_use", "id": tool["id"], "name": tool["name"], "input": {}}},
                   {"type": "content_block_delta", "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": arguments[:3]}},
                   {"type": "content_block_delta", "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": arguments[3:]}},
                   {"type": "content_block_stop", "index": i}]
    events += [{"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": completion}},
               {"type": "message_stop"}]
    call = ChatCall("m", [{"role": "user", "content": "hi"}], stream=True)
    _, chunks = run_http("anthropic", Endpoint.CHAT, call, sse(events, named=True))
    text, finishes, usage = joined(chunks)
    assert text.get(0, "") == "".join(pieces) and finishes[0] == STOP_REASONS[stop]
    assert finishes_read(client_stream(Endpoint.CHAT, chunks)) == {0: [STOP_REASONS[stop]]}
    streamed = [t for chunk in chunks for c in chunk.choices for t in c.tool_calls or ()]
    assert [(t["id"], t["function"]["name"]) for t in streamed if "id" in t] == [(t["id"], t["name"]) for t in tools]
    assert [json.loads("".join(t["function"]["arguments"] for t in streamed if t["index"] == i))
            for i in range(len(tools))] == [t["input"] for t in tools]
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (prompt, completion)


@SOME
@given(model=NAME, prompt=st.text(min_size=1, max_size=24), max_tokens=st.integers(1, 4096),
       stop=st.lists(st.text(min_size=1, max_size=8), max_size=4), temperature=st.none() | st.floats(0, 1),
       stream=st.booleans())
def test_a_completion_call_is_a_messages_request_carrying_its_values(model, prompt, max_tokens, stop, temperature,
                                                                     stream):
    call = CompletionCall(model, [prompt], max_tokens=max_tokens, stop=stop, temperature=temperature, stream=stream)
    (sent,), _ = run_http("anthropic", Endpoint.COMPLETIONS, call, sse(STOPPED, named=True) if stream else MESSAGE)
    body = sent.body
    assert problems(sent) == []
    assert (body["model"], body["max_tokens"]) == (model, max_tokens)
    assert body.get("stop_sequences", []) == stop and body.get("temperature") == temperature
    said = "".join(m["content"] for m in body["messages"][1:])  # the prompt, prefilled as the reply's start
    assert said == prompt.rstrip()


@SOME
@given(texts=st.lists(TEXT, max_size=3), stop=st.sampled_from(sorted(set(STOP_REASONS) - {"tool_use"})),
       prompt=COUNT, completion=COUNT)
def test_a_message_reaches_the_completions_client_as_the_contract_says(texts, stop, prompt, completion):
    answer = {"type": "message", "content": [{"type": "text", "text": t} for t in texts], "stop_reason": stop,
              "usage": {"input_tokens": prompt, "output_tokens": completion}}
    _, result = run_http("anthropic", Endpoint.COMPLETIONS, CompletionCall("m", ["p"]), answer)
    (choice,) = client_completion(result).choices
    assert (choice.text, choice.finish_reason) == ("".join(texts), STOP_REASONS[stop])
    usage = client_completion(result).usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (prompt, completion)


@SOME
@given(count=BAD_COUNT, side=st.sampled_from(["input_tokens", "output_tokens", "cache_read_input_tokens"]),
       chat=st.booleans())
def test_a_usage_out_of_bounds_is_the_vendors_failure_never_billed(count, side, chat):
    answer = MESSAGE | {"usage": {"input_tokens": 1, "output_tokens": 1, side: count}}
    call: Any = ChatCall("m", [{"role": "user", "content": "hi"}]) if chat else CompletionCall("m", ["p"])
    with pytest.raises(VendorFailed):
        run_http("anthropic", Endpoint.CHAT if chat else Endpoint.COMPLETIONS, call, answer)
