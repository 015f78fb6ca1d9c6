"""The inference endpoint's answers and streams (gateway/endpoints/inference/answers.py): the
vendor's JSON wrapped unchanged, each protocol's stream read to its own end, its error events and
cuts told apart, and nothing deeper than the bound passed on."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.endpoints.inference.answers import MAX_DEPTH, NativeStream, answer, chunk, decode, read_answer, too_deep
from gateway.endpoints.inference.usage import Counted
from gateway.endpoints.inference.wires import WIRES, http_wire
from gateway.vendors.http_server.options import HttpServerOptions
from gateway.vendors.untrusted import Malformed, Reported

TGI = http_wire(HttpServerOptions(
    path="/generate", stream_path="/generate_stream", stream_flag="/stream", stream_end="/generated_text",
    stream_completion_tokens="/details/generated_tokens", stream_prompt_tokens="/details/input_length"))
OPEN_ENDED = http_wire(HttpServerOptions(path="/api/generate", stream_flag="/stream", stream_format="json_lines"))


def test_an_answer_and_a_chunk_are_the_vendors_json_in_the_sdks_shapes():
    from scale_gp_beta.types import InferenceResponse, InferenceResponseChunk

    body = {"id": "msg_1", "content": [{"type": "tool_use", "name": "f", "input": {"a": [1, None]}}]}
    assert InferenceResponse.model_validate(answer(body)).response == body
    assert InferenceResponseChunk.model_validate(chunk([1, "x"])).object == "generic_inference.chunk"
    assert answer(None) == {"object": "generic_inference", "response": None}


def test_a_plain_answer_is_read_with_its_usage():
    wrapped, counted = read_answer(WIRES["anthropic"], json.dumps(
        {"content": [], "usage": {"input_tokens": 2, "output_tokens": 3}}).encode())
    assert wrapped["response"]["content"] == [] and counted == Counted(2, 3, {"cached_tokens": 0})


@pytest.mark.parametrize("body", [b"<html>", b"", b'{"a": 1', "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)])
def test_an_answer_that_is_not_json_or_too_deep_is_malformed(body):
    with pytest.raises(Malformed):
        read_answer(WIRES["openai"], body if isinstance(body, bytes) else body.encode())


def test_the_depth_bound_is_exact():
    assert not too_deep(json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH), MAX_DEPTH)
    assert too_deep(json.loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)), MAX_DEPTH)
    assert decode('{"a": [{"b": 1}]}', "x") == {"a": [{"b": 1}]}


def run(stream: NativeStream, events: list) -> list:
    sent = [stream.take(e if isinstance(e, str) else json.dumps(e)) for e in events]
    return [c["response"] for c in sent if c is not None]


ANTHROPIC = [{"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}},
             {"type": "ping"},
             {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
             {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}},
             {"type": "message_stop"}]
STREAMS = {
    "anthropic": (WIRES["anthropic"], ANTHROPIC, Counted(3, 4, {"cached_tokens": 0})),
    "gemini": (WIRES["gemini"], [{"candidates": [{"content": {"parts": [{"text": "a"}]}}]},
                                 {"candidates": [{"finishReason": "STOP"}],
                                  "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 1}}],
               Counted(2, 1)),
    "local": (WIRES["local"], [{"content": "a", "stop": False}, {"content": "", "stop": True, "tokens_evaluated": 4,
                                                                 "tokens_predicted": 1}], Counted(4, 1)),
    "http": (TGI, [{"token": {"text": "a"}, "generated_text": None, "details": None},
                   {"token": {"text": "b"}, "generated_text": "ab", "details": {"generated_tokens": 2,
                                                                                  "input_length": 1}}],
             Counted(1, 2)),
}


@pytest.mark.parametrize("protocol", STREAMS)
def test_each_event_is_passed_on_unchanged_and_the_stream_ends_at_the_vendors_own_end(protocol):
    wire, events, counted = STREAMS[protocol]
    stream = NativeStream(wire)
    assert run(stream, events) == events
    assert stream.finish() == counted


@pytest.mark.parametrize("protocol", STREAMS)
def test_a_stream_cut_before_the_vendors_end_is_malformed_and_keeps_what_it_counted(protocol):
    wire, events, _ = STREAMS[protocol]
    stream = NativeStream(wire)
    run(stream, events[:-1])
    with pytest.raises(Malformed):
        stream.finish()
    if protocol == "anthropic":
        assert stream.counted == Counted(3, 4, {"cached_tokens": 0})


def test_an_openai_stream_ends_at_done_which_is_not_passed_on_nor_the_usage_the_gateway_asked_for():
    events = [{"choices": [{"delta": {"content": "a"}}], "usage": None},
              {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}, "[DONE]"]
    asked = NativeStream(WIRES["openai"], usage_asked_by_gateway=True)
    assert run(asked, events) == events[:1]
    assert asked.finish() == Counted(3, 1)
    own = NativeStream(WIRES["openai"])
    assert run(own, events) == events[:2]
    cut = NativeStream(WIRES["openai"])
    run(cut, events[:2])
    with pytest.raises(Malformed):
        cut.finish()


def test_a_server_with_no_end_mark_ends_with_its_body():
    stream = NativeStream(OPEN_ENDED)
    assert run(stream, [{"response": "a", "done": False}]) == [{"response": "a", "done": False}]
    assert stream.finish() == Counted()


@pytest.mark.parametrize(("wire", "event", "message"), [
    (WIRES["anthropic"], {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
     "Overloaded"),
    (WIRES["openai"], {"error": {"message": "server had an error"}}, "server had an error"),
    (WIRES["gemini"], {"error": {"code": 500, "message": "Internal", "status": "INTERNAL"}}, "Internal"),
    (WIRES["local"], {"error": {"code": 500, "message": "slot unavailable", "type": "server_error"}},
     "slot unavailable"),
    (TGI, {"error": "Request failed during generation", "error_type": "generation"},
     "Request failed during generation"),
])
def test_an_error_event_is_the_vendors_reported_failure(wire, event, message):
    with pytest.raises(Reported) as caught:
        NativeStream(wire).take(json.dumps(event))
    assert caught.value.message == message


@pytest.mark.parametrize("wire", [*WIRES.values(), TGI], ids=lambda w: w.protocol)
def test_an_event_that_is_not_json_is_malformed(wire):
    with pytest.raises(Malformed):
        NativeStream(wire).take("<html>")


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                     max_leaves=15)


@settings(max_examples=300, deadline=None)
@given(wire=st.sampled_from([*WIRES.values(), TGI]), events=st.lists(_json, max_size=6))
def test_a_stream_passes_events_unchanged_or_refuses_them_as_the_vendors_fault(wire, events):
    stream = NativeStream(wire)
    for event in events:
        try:
            sent = stream.take(json.dumps(event))
        except (Malformed, Reported):
            return
        assert sent is None or sent == {"object": "generic_inference.chunk", "response": event}


# Against the house's fakes of each vendor (tests/support/fakes/), real HTTP on loopback: the body
# `prepare` makes is one the vendor takes, and its answers and streams read as the wire says.

@pytest.fixture(scope="module")
def fakes():
    from tests.support.fakes.anthropic_upstream import FakeAnthropic
    from tests.support.fakes.gemini_upstream import FakeGemini
    from tests.support.fakes.openai_upstream import FakeOpenAI
    from tests.support.fakes.server import ServerThread

    servers = {name: ServerThread(fake) for name, fake in
               (("anthropic", FakeAnthropic()), ("gemini", FakeGemini()), ("openai", FakeOpenAI()))}
    for server in servers.values():
        server.__enter__()
    yield {name: server.url for name, server in servers.items()}
    for server in servers.values():
        server.__exit__(None, None, None)


def _post(fakes, protocol, args, model):
    import httpx

    from gateway.endpoints.inference.guard import check_args, prepare, wants_stream

    wire = WIRES[protocol]
    check_args(wire, args, vendor=protocol, model=model)
    stream = wants_stream(wire, args, vendor=protocol)
    prepared = prepare(wire, args, model=model, stream=stream)
    url, headers = {
        "anthropic": (f"{fakes['anthropic']}/v1/messages", {"x-api-key": "k", "anthropic-version": "2023-06-01"}),
        "gemini": (f"{fakes['gemini']}/v1beta/models/{model}:"
                   + ("streamGenerateContent?alt=sse" if stream else "generateContent"), {"x-goog-api-key": "k"}),
        "openai": (f"{fakes['openai']}/v1/chat/completions", {"authorization": "Bearer k"}),
    }[protocol]
    answer = httpx.post(url, json=prepared.body, headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    return prepared, answer


TOOLS = [{"name": "lookup", "description": "Looks up", "input_schema": {"type": "object",
                                                                         "properties": {"url": {"type": "string"}}}}]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_use_in_its_own_shape_is_read_and_billed(fakes, stream):
    from gateway.vendors.transport.sse_reader import EventParser

    args = {"max_tokens": 16, "tools": TOOLS, "messages": [{"role": "user", "content": "find it"}], "stream": stream}
    prepared, answer = _post(fakes, "anthropic", args, "claude-x")
    if not stream:
        wrapped, counted = read_answer(WIRES["anthropic"], answer.content)
        assert wrapped["response"]["content"][-1]["type"] == "tool_use"
        assert counted.prompt_tokens == 2 and counted.completion_tokens == 5 + len(["Let me look."])
        return
    reading = NativeStream(WIRES["anthropic"])
    sent = [reading.take(event.data) for event in EventParser().feed(answer.content)]
    assert [c["response"]["type"] for c in sent][-1] == "message_stop"
    assert any(c["response"].get("delta", {}).get("type") == "input_json_delta" for c in sent)
    assert reading.finish().completion_tokens == 6


def test_a_gemini_stream_is_routed_by_the_flag_that_is_not_sent(fakes):
    from gateway.vendors.transport.sse_reader import EventParser

    args = {"contents": [{"role": "user", "parts": [{"text": "hi there"}]}],
            "generationConfig": {"maxOutputTokens": 3}, "stream": True}
    prepared, answer = _post(fakes, "gemini", args, "gemini-x")
    assert "stream" not in prepared.body
    reading = NativeStream(WIRES["gemini"])
    for event in EventParser().feed(answer.content):
        reading.take(event.data)
    assert reading.finish().completion_tokens == 3


def test_an_openai_stream_bills_the_usage_the_gateway_asked_for_and_does_not_pass_it_on(fakes):
    from gateway.vendors.transport.sse_reader import EventParser

    args = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True}
    prepared, answer = _post(fakes, "openai", args, "gpt-x")
    reading = NativeStream(WIRES["openai"], usage_asked_by_gateway=prepared.usage_asked_by_gateway)
    sent = [reading.take(event.data) for event in EventParser().feed(answer.content)]
    assert sent[-1] is None and sent[-2] is None  # [DONE], and the usage-only chunk it did not ask for
    assert all(c["response"]["choices"] for c in sent if c is not None)
    assert reading.finish().completion_tokens == 2


def test_an_integer_beyond_64_bits_is_malformed_not_rounded():
    with pytest.raises(Malformed, match="64 bits"):
        NativeStream(WIRES["local"]).take('{"content": "x", "n": -9223372036854775809}')
    assert NativeStream(WIRES["local"]).take('{"content": "x", "n": 18446744073709551615, "f": 1.5}')["response"][
        "n"] == 2**64 - 1
