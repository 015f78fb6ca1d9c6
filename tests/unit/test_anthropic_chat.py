"""vendors/anthropic/chat.py in-process: the Messages request a chat call becomes, what it refuses,
and its readers against arbitrary answers (hypothesis): they either refuse with their typed error
or give chat choices the gateway can relay (one choice, tool calls with ids, names and indexes)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.chat import ChatCall, ChatChoice
from gateway.core.config import VendorConfig
from gateway.vendors.anthropic import chat as anthropic_chat
from gateway.vendors import untrusted as read
from gateway.vendors.anthropic.messages import MessageStream
from gateway.vendors.transport.sse_reader import Event
from tests.support.vendor_answers import ANTHROPIC_EVENT, ANTHROPIC_USAGE, fields, maybe

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def call(messages, **parameters) -> ChatCall:
    return ChatCall("claude-x", messages, parameters)


@pytest.mark.parametrize(("choice", "parallel", "sent"), [
    ("none", None, {"type": "none"}),
    ("none", False, {"type": "none"}),  # nothing to call: nothing to run in parallel
    ("required", None, {"type": "any"}),
    ({"type": "function", "function": {"name": "f"}}, None, {"type": "tool", "name": "f"}),
    (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    (None, None, None),
])
def test_tool_choice(choice, parallel, sent):
    given = {"tools": [TOOL]} | ({} if choice is None else {"tool_choice": choice}) | \
        ({} if parallel is None else {"parallel_tool_calls": parallel})
    payload = anthropic_chat.chat_payload(call([{"role": "user", "content": "x"}], **given))
    assert payload.get("tool_choice") == sent
    assert payload["tools"] == [{"name": "f", "input_schema": {"type": "object"}}]


def test_tool_choice_without_tools_sends_neither():
    payload = anthropic_chat.chat_payload(call([{"role": "user", "content": "x"}], tool_choice="none"))
    assert "tools" not in payload and "tool_choice" not in payload


def test_empty_messages_are_dropped_before_turns_merge():
    payload = anthropic_chat.chat_payload(call([{"role": "user", "content": "a"}, {"role": "assistant", "content": ""},
                                                {"role": "user", "content": [{"type": "text", "text": ""}]},
                                                {"role": "user", "content": "b"}]))
    assert payload["messages"] == [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                {"type": "text", "text": "b"}]}]
    assert "system" not in payload


@pytest.mark.parametrize(("message", "why"), [
    ({"role": "user", "content": "x", "name": "ann"}, "participant names"),
    ({"role": "function", "name": "f", "content": "x"}, "a function message answering no earlier function_call"),
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/bmp;base64,AAAA"}}]},
     "image/bmp"),
    ({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}, "JSON object"),
])
def test_what_the_messages_api_cannot_take_is_refused(message, why):
    param, reason = anthropic_chat.refused(call([message]))
    assert param == "messages" and why in reason and reason.startswith("messages[0]")


TOOL_USE = fields(type=st.just("tool_use"), id=st.text(max_size=6), name=st.text(max_size=6),
                  input=st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
MESSAGE = fields(content=st.lists(st.one_of(fields(type=st.just("text"), text=st.text(max_size=8)), TOOL_USE),
                                  max_size=3),
                 stop_reason=st.sampled_from(["end_turn", "tool_use", "max_tokens", "pause_turn"]),
                 usage=ANTHROPIC_USAGE)
INDEX = st.integers(0, 3)
EVENT = st.one_of(
    ANTHROPIC_EVENT,
    fields(type=st.just("content_block_start"), index=INDEX, content_block=st.one_of(
        TOOL_USE, fields(type=st.just("text"), text=st.text(max_size=4)))),
    fields(type=st.just("content_block_delta"), index=INDEX,
           delta=fields(type=st.just("input_json_delta"), partial_json=st.text(max_size=6))),
    fields(type=st.just("content_block_stop"), index=INDEX))


def check_choice(choice, streamed: bool) -> None:
    assert isinstance(choice, ChatChoice) and choice.index == 0 and isinstance(choice.text, str)
    assert choice.finish_reason in (None, "stop", "length", "tool_calls", "content_filter")
    for tool_call in choice.tool_calls or ():
        if "id" in tool_call:
            assert tool_call["id"] and tool_call["type"] == "function" and tool_call["function"]["name"]
        assert isinstance(tool_call["function"]["arguments"], str)
        assert ("index" in tool_call) == streamed
    orjson.dumps(choice.tool_calls)


@FAST
@given(data=maybe(MESSAGE))
def test_the_message_reader_answers_one_chat_choice_or_refuses(data):
    try:
        result = anthropic_chat.read_chat_message(data)
    except read.Malformed:
        return
    (choice,) = result.choices
    check_choice(choice, streamed=False)
    for tool_call in choice.tool_calls or ():
        assert isinstance(orjson.loads(tool_call["function"]["arguments"]), dict)


@FAST
@given(events=st.lists(maybe(EVENT), max_size=8))
def test_the_stream_reader_gives_tool_call_deltas_with_stable_indexes(events):
    reader = anthropic_chat.ChatEvents()
    first_of: dict[int, dict] = {}
    for event in events:
        try:
            chunk = reader.read(event)
        except (read.Malformed, read.Reported):
            return
        if chunk is None:
            continue
        for choice in chunk.choices:
            check_choice(choice, streamed=True)
            for tool_call in choice.tool_calls or ():
                # id and name once, in a tool call's first delta only; indexes counted from 0
                assert ("id" in tool_call) == (tool_call["index"] not in first_of)
                assert tool_call["index"] <= len(first_of)
                first_of.setdefault(tool_call["index"], tool_call)
        if reader.stopped:
            return


def test_a_stream_event_that_is_not_json_is_the_vendors_failure():
    stream = MessageStream(VendorConfig(name="a", protocol="anthropic"), anthropic_chat.ChatEvents())
    chunks, ended, fault = stream.read([Event(data="{not json", event=None)])
    assert (chunks, ended) == ([], False) and "malformed stream event" in fault.message


def test_a_json_answers_forced_call_streams_as_content():
    reader = anthropic_chat.ChatEvents(json_answer="said")
    events = [{"type": "content_block_start", "index": 0,
               "content_block": {"type": "tool_use", "id": "t", "name": "said", "input": {}}},
              {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"a"'}},
              {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ": 1}"}},
              {"type": "content_block_stop", "index": 0},
              {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}},
              {"type": "message_stop"}]
    choices = [c for event in events if (chunk := reader.read(event)) for c in chunk.choices]
    assert "".join(c.text for c in choices) == '{"a": 1}' and not any(c.tool_calls for c in choices)
    assert [c.finish_reason for c in choices if c.finish_reason] == ["stop"]


def test_whitespace_text_is_left_out_and_a_final_prefill_ends_without_it():
    payload = anthropic_chat.chat_payload(call([{"role": "system", "content": " "}, {"role": "user", "content": "q"},
                                                {"role": "user", "content": "\n"},
                                                {"role": "assistant", "content": "A: "}]))
    assert "system" not in payload
    assert payload["messages"] == [{"role": "user", "content": [{"type": "text", "text": "q"}]},
                                   {"role": "assistant", "content": [{"type": "text", "text": "A:"}]}]


@pytest.mark.parametrize(("messages", "why"), [
    ([{"role": "system", "content": "s"}, {"role": "user", "content": " "}], "needs a turn"),
    ([{"role": "assistant", "content": "hello"}, {"role": "user", "content": "hi"}], "starts with the user's"),
])
def test_a_conversation_without_a_first_user_turn_is_refused(messages, why):
    assert why in anthropic_chat.refused(call(messages))[1]
