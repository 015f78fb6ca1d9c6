"""Usage on /v5/inference (gateway/endpoints/inference/usage.py): each protocol's own counts, in a
plain answer and through a stream, checked as untrusted; "not reported" where absent, then counted
by the gateway and flagged estimated."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.completion import MAX_USAGE_TOKENS
from gateway.endpoints.inference.usage import NOT_REPORTED, Counted, UsageTally, read_usage
from gateway.endpoints.inference.wires import WIRES, http_wire
from gateway.vendors.http_server.options import HttpServerOptions
from gateway.vendors.untrusted import Malformed

TGI = http_wire(HttpServerOptions(
    path="/generate", stream_path="/generate_stream", stream_flag="/stream", stream_end="/generated_text",
    completion_tokens="/details/generated_tokens", stream_prompt_tokens="/details/input_length",
    stream_completion_tokens="/details/generated_tokens"))


@pytest.mark.parametrize(("wire", "answer", "counted"), [
    (WIRES["openai"], {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13,
                                                "prompt_tokens_details": {"cached_tokens": 2}}},
     Counted(9, 4, {"cached_tokens": 2})),
    (WIRES["anthropic"], {"content": [], "usage": {"input_tokens": 5, "output_tokens": 7,
                                                   "cache_creation_input_tokens": 3, "cache_read_input_tokens": 11}},
     Counted(19, 7, {"cached_tokens": 11, "cache_creation_tokens": 3})),
    (WIRES["gemini"], {"usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 6, "thoughtsTokenCount": 10,
                                         "cachedContentTokenCount": 8, "toolUsePromptTokenCount": 4}},
     Counted(24, 16, {"cached_tokens": 8}, {"reasoning_tokens": 10})),
    (WIRES["gemini"], {"usageMetadata": {"promptTokenCount": 3}}, Counted(3, 0)),  # Gemini leaves out zeros
    (WIRES["local"], {"content": "x", "tokens_evaluated": 12, "tokens_predicted": 5, "timings": {"cache_n": 4}},
     Counted(12, 5, {"cached_tokens": 4})),
    (WIRES["local"], {"content": "x", "timings": {"prompt_n": 3, "cache_n": 4, "predicted_n": 2}},
     Counted(7, 2, {"cached_tokens": 4})),
    (TGI, {"generated_text": "x", "details": {"generated_tokens": 6}}, Counted(None, 6)),
], ids=["openai", "anthropic", "gemini", "gemini-zeros", "llama.cpp", "llama.cpp-timings", "http"])
def test_a_plain_answer_is_billed_from_the_vendors_own_fields(wire, answer, counted):
    assert read_usage(wire, answer) == counted


@pytest.mark.parametrize("wire", [*WIRES.values(), TGI], ids=lambda w: w.protocol)
@pytest.mark.parametrize("answer", [{"text": "hi"}, [1, 2], "text", None, {"usage": None, "usageMetadata": None}])
def test_an_answer_without_usage_reports_none(wire, answer):
    assert read_usage(wire, answer) is NOT_REPORTED


def test_what_was_not_reported_is_counted_by_the_gateway_and_flagged():
    asked: list[str] = []
    usage = Counted(None, 6).billed(lambda: asked.append("prompt") or 11, lambda: asked.append("completion") or 0)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.estimated, asked) == (11, 6, True, ["prompt"])
    usage = Counted(3, 4).billed(lambda: pytest.fail("not asked"), lambda: pytest.fail("not asked"))
    assert (usage.prompt_tokens, usage.completion_tokens, usage.estimated) == (3, 4, False)


@pytest.mark.parametrize(("wire", "answer", "field"), [
    (WIRES["openai"], {"usage": {"prompt_tokens": -1, "completion_tokens": 1}}, "usage.prompt_tokens"),
    (WIRES["anthropic"], {"usage": {"input_tokens": "5", "output_tokens": 1}}, "usage.input_tokens"),
    (WIRES["anthropic"], {"usage": {"input_tokens": MAX_USAGE_TOKENS, "output_tokens": 1,
                                    "cache_read_input_tokens": 1}}, "usage"),
    (WIRES["gemini"], {"usageMetadata": {"promptTokenCount": 1.5}}, "promptTokenCount"),
    (WIRES["local"], {"tokens_evaluated": True, "tokens_predicted": 1}, "tokens_evaluated"),
    (WIRES["local"], {"timings": {"prompt_n": MAX_USAGE_TOKENS, "cache_n": 1}}, "prompt"),
    (TGI, {"details": {"generated_tokens": 10**12}}, "/details/generated_tokens"),
    (WIRES["gemini"], {"usageMetadata": ["not", "an object"]}, "usageMetadata"),
])
def test_a_count_out_of_range_or_of_the_wrong_kind_is_malformed_naming_the_field(wire, answer, field):
    with pytest.raises(Malformed) as caught:
        read_usage(wire, answer)
    assert field in str(caught.value)


def tally(wire, events):
    counting = UsageTally(wire)
    for event in events:
        counting.feed(event)
    return counting.counted


def test_an_anthropic_stream_is_billed_from_message_start_and_the_cumulative_message_delta():
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 10, "output_tokens": 1,
                                                        "cache_read_input_tokens": 5}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
        {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 12}},
        {"type": "message_stop"},
    ]
    assert tally(WIRES["anthropic"], events) == Counted(15, 12, {"cached_tokens": 5})
    assert tally(WIRES["anthropic"], events[:2]) == Counted(15, 1, {"cached_tokens": 5})  # cut short: what was said


def test_a_gemini_stream_is_billed_from_its_last_usage_metadata():
    events = [{"candidates": [], "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 1}},
              {"candidates": [{"finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 4,
                                                                           "candidatesTokenCount": 7}}]
    assert tally(WIRES["gemini"], events) == Counted(4, 7)


def test_an_openai_stream_is_billed_from_its_usage_chunk():
    events = [{"choices": [{"delta": {"content": "a"}}], "usage": None},
              {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}]
    assert tally(WIRES["openai"], events) == Counted(3, 2)
    assert tally(WIRES["openai"], events[:1]) is NOT_REPORTED


def test_a_llama_cpp_stream_is_billed_from_its_last_event():
    events = [{"content": "a", "stop": False, "tokens_predicted": 1, "tokens_evaluated": 6},
              {"content": "", "stop": True, "tokens_predicted": 3, "tokens_evaluated": 6,
               "timings": {"cache_n": 2, "prompt_n": 4, "predicted_n": 3}}]
    assert tally(WIRES["local"], events) == Counted(6, 3, {"cached_tokens": 2})


def test_an_http_stream_keeps_the_last_value_of_each_pointer():
    events = [{"token": {"text": " w0"}, "details": None},
              {"token": {"text": " w1"}, "generated_text": " w0 w1",
               "details": {"generated_tokens": 2, "input_length": 5}}]
    assert tally(TGI, events) == Counted(5, 2)
    assert tally(TGI, events[:1]) is NOT_REPORTED


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from([
        "usage", "usageMetadata", "prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
        "cache_read_input_tokens", "promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount",
        "toolUsePromptTokenCount", "tokens_evaluated", "tokens_predicted", "timings", "prompt_n", "cache_n",
        "predicted_n", "details", "generated_tokens", "input_length", "type", "message", "x"]), inner, max_size=5),
    max_leaves=25)


def _well_formed(counted: Counted) -> bool:
    counts = [counted.prompt_tokens, counted.completion_tokens]
    details = [*(counted.prompt_tokens_details or {}).values(), *(counted.completion_tokens_details or {}).values()]
    return all(c is None or (type(c) is int and 0 <= c <= MAX_USAGE_TOKENS) for c in counts) and \
        all(type(d) is int and 0 <= d <= MAX_USAGE_TOKENS for d in details)


@settings(max_examples=500, deadline=None)
@given(wire=st.sampled_from([*WIRES.values(), TGI]), answer=_json)
def test_a_usage_reader_gives_counts_within_bounds_or_refuses_the_answer(wire, answer):
    try:
        counted = read_usage(wire, answer)
    except Malformed:
        return
    assert _well_formed(counted)


@settings(max_examples=300, deadline=None)
@given(wire=st.sampled_from([*WIRES.values(), TGI]), events=st.lists(_json, max_size=5),
       kinds=st.lists(st.sampled_from(["message_start", "message_delta"]), min_size=5, max_size=5))
def test_a_stream_tally_gives_counts_within_bounds_or_refuses_the_event(wire, events, kinds):
    counting = UsageTally(wire)
    for event, kind in zip(events, kinds, strict=False):
        if isinstance(event, dict) and wire.protocol == "anthropic":
            event = {**event, "type": kind}
        try:
            counting.feed(event)
        except Malformed:
            return
        assert _well_formed(counting.counted)
