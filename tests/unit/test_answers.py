"""Every answer the endpoints' units write (gateway/endpoints/*/answer.py, their measured orjson
fast path) is the contract's generated response model, whole and streamed: for any choices the
planner can hand them, the bytes parse as `Completion` / `ChatCompletion` (`ChatCompletionChunk`
and a completion's chunk for a stream's pieces), and say what the choices said."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.chat import ChatChoice
from gateway.core.completion import Choice, Result, Usage
from gateway.endpoints.chat import answer as chat
from gateway.endpoints.chat.unit import UNIT as CHAT
from gateway.endpoints.completions import answer as completions
from gateway.endpoints.completions.unit import UNIT as COMPLETIONS
from generated.models import ChatCompletion, ChatCompletionChunk, Completion

TEXT = st.text(max_size=40)
COUNT = st.integers(min_value=0, max_value=10**9)
HEAD = st.fixed_dictionaries({"id": st.text(min_size=1, max_size=20), "created": st.integers(0, 2**40),
                              "model": st.text(min_size=1, max_size=30)})
USAGE = st.builds(Usage, COUNT, COUNT,
                  st.none() | st.fixed_dictionaries({"cached_tokens": COUNT}),
                  st.none() | st.fixed_dictionaries({"reasoning_tokens": COUNT}), st.booleans())
FINGERPRINT = st.none() | st.text(min_size=1, max_size=20)


@st.composite
def legacy_logprobs(draw):
    tokens = draw(st.lists(TEXT, max_size=4))
    return {"tokens": tokens, "token_logprobs": [draw(st.none() | st.floats(-50, 0)) for _ in tokens],
            "top_logprobs": [draw(st.none() | st.dictionaries(TEXT, st.floats(-50, 0), max_size=2)) for _ in tokens],
            "text_offset": [draw(st.integers(0, 100)) for _ in tokens]}


@st.composite
def completion_choices(draw):
    count = draw(st.integers(1, 4))
    return [Choice(i, draw(TEXT), draw(st.sampled_from(["stop", "length", "content_filter", None])),
                   draw(st.none() | legacy_logprobs())) for i in range(count)]


TOOL_CALL = st.builds(lambda i, name, arguments: {"id": f"call_{i}", "type": "function",
                                                   "function": {"name": name, "arguments": arguments}},
                      st.integers(0, 99), st.text(min_size=1, max_size=10), TEXT)


@st.composite
def chat_choices(draw):
    count = draw(st.integers(1, 4))
    return [ChatChoice(i, draw(TEXT), draw(st.sampled_from(["stop", "length", "tool_calls", "content_filter",
                                                              "function_call", None])),
                       draw(st.none() | st.just({"content": [], "refusal": None})),
                       tool_calls=draw(st.none() | st.lists(TOOL_CALL, min_size=1, max_size=2)),
                       function_call=draw(st.none() | st.fixed_dictionaries({"name": TEXT, "arguments": TEXT})),
                       refusal=draw(st.none() | TEXT)) for i in range(count)]


def usage_of(model_usage) -> tuple[int, int, int, bool]:
    return (model_usage.prompt_tokens, model_usage.completion_tokens, model_usage.total_tokens,
            model_usage.estimated is True)


@settings(max_examples=150, deadline=None)
@given(HEAD, completion_choices(), USAGE, FINGERPRINT)
def test_a_completion_is_the_contracts_completion(head, choices, usage, fingerprint):
    body = COMPLETIONS.body(head | {"object": "text_completion"}, None, Result(choices, usage, fingerprint), usage)  # type: ignore[arg-type]
    answer = Completion.model_validate_json(body)
    assert (answer.id, answer.created, answer.model) == (head["id"], head["created"], head["model"])
    assert [(c.index, c.text, c.finish_reason) for c in answer.choices] == \
        [(c.index, c.text, c.finish_reason or "stop") for c in choices]
    assert [c.logprobs is None for c in answer.choices] == [c.logprobs is None for c in choices]
    assert usage_of(answer.usage) == (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens,
                                      usage.estimated)
    assert orjson.loads(body).get("system_fingerprint") == fingerprint


@settings(max_examples=150, deadline=None)
@given(HEAD, chat_choices(), USAGE, FINGERPRINT)
def test_a_chat_completion_is_the_contracts_chat_completion(head, choices, usage, fingerprint):
    body = CHAT.body(head | {"object": "chat.completion"}, None, Result(choices, usage, fingerprint), usage)  # type: ignore[arg-type]
    answer = ChatCompletion.model_validate_json(body)
    assert [c.index for c in answer.choices] == sorted(c.index for c in choices)
    for written, choice in zip(answer.choices, sorted(choices, key=lambda c: c.index), strict=True):
        assert written.finish_reason == (choice.finish_reason or "stop")
        assert (written.message.content or "") == choice.text
        assert (len(written.message.tool_calls) if isinstance(written.message.tool_calls, list) else 0) == \
            len(choice.tool_calls or ())
    assert usage_of(answer.usage)[:3] == (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)


def chunk(head, object_: str, pieces) -> bytes:
    return orjson.dumps(head | {"object": object_, "choices": pieces})


@settings(max_examples=150, deadline=None)
@given(HEAD, completion_choices())
def test_a_completions_streamed_piece_is_the_contracts_completion_chunk(head, choices):
    shape = COMPLETIONS.shape()
    pieces = [p for c in choices if (p := shape.piece(c, c.finish_reason)) is not None]
    pieces += [shape.closing(len(choices))]
    # A piece before its choice finishes says `finish_reason: null`, as OpenAI streams it; the
    # contract's CompletionChoice has no null (a gap of openapi.json's, not of the answer): held to
    # the model with the finish it will have, and the null checked to be the only difference.
    open_ = [p["finish_reason"] is None for p in pieces]
    finished = [p | {"finish_reason": p["finish_reason"] or "stop"} for p in pieces]
    written = Completion.model_validate_json(chunk(head, "text_completion", finished))
    assert [c.text for c in written.choices[:-1]] == [c.text for c in choices if c.text or c.finish_reason
                                                       or c.logprobs]
    assert open_ == [c.finish_reason is None for c in choices if c.text or c.finish_reason or c.logprobs] + [False]


@settings(max_examples=150, deadline=None)
@given(HEAD, chat_choices())
def test_a_chat_streamed_piece_is_the_contracts_chat_completion_chunk(head, choices):
    shape = CHAT.shape()
    streamed = [ChatChoice(c.index, c.text, c.finish_reason, c.logprobs,
                           tool_calls=[{"index": i, **call} for i, call in enumerate(c.tool_calls or ())] or None,
                           function_call=c.function_call, refusal=c.refusal) for c in choices]
    pieces = [p for c in streamed if (p := shape.piece(c, c.finish_reason)) is not None]
    pieces += [shape.closing(index) for index in (0, len(choices))]
    written = ChatCompletionChunk.model_validate_json(chunk(head, "chat.completion.chunk", pieces))
    assert written.choices[0].delta.role == "assistant"  # each choice's first piece says who speaks


def test_the_usage_says_estimated_only_when_it_was():
    assert "estimated" not in completions.usage_body(Usage(1, 2))
    assert chat.usage_body(Usage(1, 2, estimated=True))["estimated"] is True
