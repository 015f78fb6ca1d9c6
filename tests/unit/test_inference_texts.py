"""The texts the gateway counts when a vendor reports no usage (gateway/endpoints/inference/texts.py):
every string of the request but inline media; the generated part of each protocol's answer and
stream events, not their ids and labels."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.endpoints.inference.texts import MAX_TEXT, answer_text, event_text, prompt_text
from gateway.endpoints.inference.wires import WIRES, http_wire
from gateway.vendors.http_server.options import HttpServerOptions

TGI = http_wire(HttpServerOptions(path="/generate", completion_text="/generated_text",
                                  stream_completion_text="/token/text"))
BARE = http_wire(HttpServerOptions(path="/infer"))


def test_a_prompt_is_every_string_of_args_but_inline_media():
    args = {"system": "Be brief.", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo" * 1000}}]}],
        "contents": [{"parts": [{"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
                                {"image_url": {"url": "data:image/png;base64,AAAA"}}]}],
        "tools": [{"name": "lookup", "input_schema": {"type": "object"}}], "max_tokens": 5}
    text = prompt_text(args)
    for said in ("Be brief.", "What is this?", "lookup", "user"):
        assert said in text
    assert "iVBORw0KGgo" not in text and "AAAA" not in text


def test_each_protocols_answer_is_its_generated_part():
    assert answer_text(WIRES["anthropic"], {"id": "msg_1", "model": "m", "content": [
        {"type": "thinking", "thinking": "hmm "}, {"type": "text", "text": "Hi"},
        {"type": "tool_use", "id": "t", "name": "f", "input": {"q": 1}}]}) == 'hmm Hi{"q":1}'
    assert answer_text(WIRES["gemini"], {"candidates": [{"content": {"parts": [
        {"text": "a"}, {"functionCall": {"name": "f", "args": {}}}]}, "finishReason": "STOP"}]}) == \
        'a{"name":"f","args":{}}'
    assert answer_text(WIRES["openai"], {"id": "c", "choices": [{"message": {"role": "assistant", "content": "x",
        "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{}"}}]}}]}) == "xf{}"
    assert answer_text(WIRES["local"], {"content": "done", "model": "m"}) == "done"
    assert answer_text(TGI, {"generated_text": "gen", "details": {"finish_reason": "length"}}) == "gen"
    assert answer_text(BARE, {"outputs": [{"text": "o"}]}) == "o"


def test_each_protocols_stream_event_is_its_piece():
    assert event_text(WIRES["anthropic"], {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": "w"}}) == "w"
    assert event_text(WIRES["anthropic"], {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}) == ""
    assert event_text(WIRES["openai"], {"choices": [{"delta": {"content": "d"}}]}) == "d"
    assert event_text(WIRES["local"], {"content": "c", "stop": False}) == "c"
    assert event_text(TGI, {"token": {"text": " t"}, "generated_text": None}) == " t"
    assert event_text(WIRES["gemini"], ["not", "an", "object"]) == ""


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.text(max_size=10),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                    max_leaves=30))
def test_any_json_gives_a_bounded_text(value):
    assert len(prompt_text(value)) <= MAX_TEXT + 10_000
    for wire in (*WIRES.values(), TGI, BARE):
        assert isinstance(answer_text(wire, value), str) and isinstance(event_text(wire, value), str)
