"""vendors/gemini/completions.py and chat.py, property-based (hypothesis): from a call to the
GenerateContentRequest, which the Gemini fake's documented-shape check takes
(tests/support/fakes/gemini_upstream.py) and which carries the call's model, max tokens, stop
sequences, temperature and tools exactly; and from a GenerateContentResponse (whole or streamed) to
what the client reads, which the contract's generated models take, with text, function calls and
usage carried exactly and finish reasons mapped into the contract's."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.chat import ChatCall
from gateway.core.completion import MAX_USAGE_TOKENS, CompletionCall
from gateway.core.endpoint import Endpoint
from gateway.core.errors import VendorFailed
from gateway.vendors.gemini import chat as gemini_chat
from tests.support.fakes import gemini_upstream
from tests.support.translators import (NAME, chat_parameters, client_chat, client_completion, client_stream,
                                       finishes_read, joined, run_http)

SOME = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MODEL = st.from_regex(r"[a-z0-9-]{1,24}", fullmatch=True)
TEXT = st.text(max_size=24)
COUNT = st.integers(0, 10**6)
# A count no vendor can mean: negative, past the most one call can use (core/completion.py
# MAX_USAGE_TOKENS), a fraction, not a number.
BAD_COUNT = st.one_of(st.integers(max_value=-1), st.integers(min_value=MAX_USAGE_TOKENS + 1, max_value=2**70),
                      st.floats(0.5, 10**6).filter(lambda f: not f.is_integer()), st.text(max_size=3), st.booleans())
FINISH = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter", "RECITATION": "content_filter",
          "BLOCKLIST": "content_filter", "OTHER": "stop", "A_REASON_ADDED_LATER": "stop"}  # fmt: skip
ARGS = st.dictionaries(NAME, st.integers() | st.text(max_size=4), max_size=3)


def problems(sent) -> list[str]:
    method = sent.url.path.rsplit(":", 1)[1]
    return gemini_upstream._problems(dict(sent.headers), parse_qs(sent.url.query.decode()), method, sent.body)


ANSWER = {"candidates": [{"index": 0, "content": {"parts": [{"text": "x"}]}, "finishReason": "STOP"}],
          "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1}}


def sse(responses: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + json.dumps(r).encode() + b"\r\n\r\n" for r in responses)


@SOME
@given(model=MODEL, parameters=chat_parameters(), stream=st.booleans())
def test_a_chat_call_is_a_request_gemini_takes_carrying_its_values(model, parameters, stream):
    call = ChatCall(model, [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
                    parameters, stream=stream)
    if (refusal := gemini_chat.refused(call)) is not None:  # the planner's 400, naming it
        assert refusal[0].startswith("tools") or refusal[0].startswith("tool_choice"), refusal
        return
    (sent,), _ = run_http("gemini", Endpoint.CHAT, call, sse([ANSWER]) if stream else ANSWER)
    body, config = sent.body, sent.body.get("generationConfig", {})
    assert problems(sent) == []
    assert sent.url.path == f"/models/{model}:{'streamGenerateContent' if stream else 'generateContent'}"
    assert config.get("maxOutputTokens") == (parameters.get("max_completion_tokens") or parameters.get("max_tokens"))
    stop = parameters.get("stop")
    assert config.get("stopSequences") == (None if stop is None else [stop] if isinstance(stop, str) else stop)
    assert config.get("temperature") == parameters.get("temperature")
    tools = parameters.get("tools") or []
    declared = [d["name"] for tool in body.get("tools", []) for d in tool["functionDeclarations"]]
    assert declared == [t["function"]["name"] for t in tools]
    choice = parameters.get("tool_choice")
    calling = body.get("toolConfig", {}).get("functionCallingConfig")
    if tools and isinstance(choice, dict):
        assert calling == {"mode": "ANY", "allowedFunctionNames": [choice["function"]["name"]]}
    elif tools and choice == "required":
        assert calling == {"mode": "ANY"}


@st.composite
def candidates(draw, n: int) -> list[dict[str, Any]]:
    found = []
    for i in range(n):
        texts = draw(st.lists(TEXT, max_size=3))
        calls = draw(st.lists(st.tuples(NAME, ARGS), max_size=2))
        parts = [{"text": t} for t in texts] + [{"functionCall": {"name": name, "args": args}} for name, args in calls]
        found.append({"index": i, "content": {"role": "model", "parts": parts or [{"text": ""}]},
                      "finishReason": draw(st.sampled_from(sorted(FINISH)))})
    return found


def mapped(candidate: dict[str, Any]) -> str:
    reason = FINISH[candidate["finishReason"]]
    calls = any("functionCall" in p for p in candidate["content"]["parts"])
    return "tool_calls" if reason == "stop" and calls else reason


@SOME
@given(data=st.data(), n=st.integers(1, 3), prompt=COUNT, completion=COUNT)
def test_an_answer_reaches_the_chat_client_as_the_contract_says(data, n, prompt, completion):
    found = data.draw(candidates(n))
    answer = {"candidates": found, "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": completion}}
    call = ChatCall("m", [{"role": "user", "content": "hi"}], {"n": n} if n > 1 else {})
    _, result = run_http("gemini", Endpoint.CHAT, call, answer, {"max_candidates": 4})
    client = client_chat(result)
    for choice, candidate in zip(client.choices, found, strict=True):
        parts = candidate["content"]["parts"]
        message = choice.message
        assert (message.content if isinstance(message.content, str) else "") == "".join(p.get("text", "") for p in parts)
        calls = message.tool_calls if isinstance(message.tool_calls, list) else []
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == \
            [(p["functionCall"]["name"], p["functionCall"]["args"]) for p in parts if "functionCall" in p]
        assert len({c.id for c in calls}) == len(calls)  # ids the client can answer each call by
        assert choice.finish_reason == mapped(candidate)
    assert (client.usage.prompt_tokens, client.usage.completion_tokens, client.usage.total_tokens) == \
        (prompt, completion, prompt + completion)


@SOME
@given(pieces=st.lists(TEXT, min_size=1, max_size=4), finish=st.sampled_from(sorted(FINISH)), prompt=COUNT,
       completion=COUNT, chat=st.booleans())
def test_a_stream_reaches_the_client_exactly(pieces, finish, prompt, completion, chat):
    responses = [{"candidates": [{"index": 0, "content": {"role": "model", "parts": [{"text": p}]}}]}
                 for p in pieces]
    responses[-1]["candidates"][0]["finishReason"] = finish
    responses[-1]["usageMetadata"] = {"promptTokenCount": prompt, "candidatesTokenCount": completion}
    if chat:
        call: Any = ChatCall("m", [{"role": "user", "content": "hi"}], stream=True)
    else:
        call = CompletionCall("m", ["hi"], stream=True)
    _, chunks = run_http("gemini", Endpoint.CHAT if chat else Endpoint.COMPLETIONS, call, sse(responses))
    text, finishes, usage = joined(chunks)
    assert text == {0: "".join(pieces)} and finishes[0] == FINISH[finish]
    endpoint = Endpoint.CHAT if chat else Endpoint.COMPLETIONS
    assert finishes_read(client_stream(endpoint, chunks)) == {0: [FINISH[finish]]}
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (prompt, completion)


@SOME
@given(model=MODEL, prompt=TEXT, max_tokens=st.integers(1, 4096), stop=st.lists(st.text(min_size=1, max_size=8),
       max_size=4), temperature=st.none() | st.floats(0, 2), stream=st.booleans())
def test_a_completion_call_is_a_request_gemini_takes_carrying_its_values(model, prompt, max_tokens, stop,
                                                                         temperature, stream):
    call = CompletionCall(model, [prompt], max_tokens=max_tokens, stop=stop, temperature=temperature, stream=stream)
    (sent,), _ = run_http("gemini", Endpoint.COMPLETIONS, call, sse([ANSWER]) if stream else ANSWER)
    config = sent.body["generationConfig"]
    assert problems(sent) == []
    assert sent.body["contents"] == [{"role": "user", "parts": [{"text": prompt}]}]
    assert config["maxOutputTokens"] == max_tokens and config.get("stopSequences", []) == stop
    assert config.get("temperature") == temperature


@SOME
@given(data=st.data(), prompt=COUNT, completion=COUNT)
def test_an_answer_reaches_the_completions_client_as_the_contract_says(data, prompt, completion):
    texts = data.draw(st.lists(TEXT, max_size=3))
    finish = data.draw(st.sampled_from(sorted(FINISH)))
    answer = {"candidates": [{"index": 0, "content": {"parts": [{"text": t} for t in texts] or [{"text": ""}]},
                              "finishReason": finish}],
              "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": completion}}
    _, result = run_http("gemini", Endpoint.COMPLETIONS, CompletionCall("m", ["p"]), answer)
    client = client_completion(result)
    (choice,) = client.choices
    assert (choice.text, choice.finish_reason) == ("".join(texts), FINISH[finish])
    assert (client.usage.prompt_tokens, client.usage.completion_tokens) == (prompt, completion)


@SOME
@given(count=BAD_COUNT, side=st.sampled_from(["promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount"]),
       chat=st.booleans())
def test_a_usage_out_of_bounds_is_the_vendors_failure_never_billed(count, side, chat):
    answer = ANSWER | {"usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, side: count}}
    call: Any = ChatCall("m", [{"role": "user", "content": "hi"}]) if chat else CompletionCall("m", ["p"])
    with pytest.raises(VendorFailed):
        run_http("gemini", Endpoint.CHAT if chat else Endpoint.COMPLETIONS, call, answer)
