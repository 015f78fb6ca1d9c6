"""vendors/conversation.py in-process: the deprecated functions as tools of one call at a time, and
an answer's one tool call as the function_call it was asked as."""

from __future__ import annotations

import pytest

from gateway.core.chat import ChatCall, ChatChoice
from gateway.vendors import conversation
from gateway.vendors import untrusted as read

FUNCTION = {"name": "f", "parameters": {"type": "object"}}


def test_a_call_without_functions_is_itself():
    call = ChatCall("m", [{"role": "user", "content": "x"}], {"tools": [{"type": "function", "function": FUNCTION}]})
    assert conversation.with_tools(call) is call


def test_functions_become_tools_of_one_call_at_a_time():
    messages = [{"role": "user", "content": "x"},
                {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
                {"role": "function", "name": "f", "content": "done"},
                {"role": "function", "name": "f", "content": "again?"}]
    call = ChatCall("m", messages, {"functions": [FUNCTION], "function_call": {"name": "f"}, "user": "u"})
    asked = conversation.with_tools(call)
    assert asked.parameters == {"tools": [{"type": "function", "function": FUNCTION}], "parallel_tool_calls": False,
                                "tool_choice": {"type": "function", "function": {"name": "f"}}, "user": "u"}
    assert asked.messages[1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "fn_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "fn_1", "content": "done"},
        {"role": "function", "name": "f", "content": "again?"},  # answers no call: refused as it is
    ]
    assert conversation.refused(asked.messages, "the API", lambda url: None)[1].startswith(
        "messages[3]: a function message answering no earlier function_call")
    assert asked.served_by is call.served_by


def test_the_one_tool_call_is_the_function_call():
    choice = ChatChoice(0, "", "tool_calls", tool_calls=[{"id": "a", "type": "function",
                                                          "function": {"name": "f", "arguments": "{}"}}])
    conversation.as_function_call(choice)
    assert (choice.function_call, choice.tool_calls, choice.finish_reason) == (
        {"name": "f", "arguments": "{}"}, None, "function_call")
    piece = ChatChoice(0, "", tool_calls=[{"index": 0, "function": {"arguments": "{"}}])
    conversation.as_function_call(piece)
    assert piece.function_call == {"arguments": "{"}


@pytest.mark.parametrize("calls", [
    [{"id": "a", "function": {"name": "f", "arguments": "{}"}}, {"id": "b", "function": {"name": "g", "arguments": "{}"}}],
    [{"index": 1, "id": "b", "function": {"name": "g", "arguments": ""}}],
])
def test_several_calls_cannot_be_one_function_call(calls):
    with pytest.raises(read.Malformed):
        conversation.as_function_call(ChatChoice(0, "", tool_calls=calls))


def test_the_first_image_part_is_named_by_where_it_stands():
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "x"}]},
                {"role": "user", "content": [{"type": "text", "text": "y"}, image, image]}]
    assert conversation.first_image(messages) == "messages[2].content[1]"
    assert conversation.first_image(messages[:2]) is None
