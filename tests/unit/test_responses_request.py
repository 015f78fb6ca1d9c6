"""gateway/endpoints/responses/request.py: a Responses request to a chat-completions body, each
field honoured, mapped or refused by name; call ids kept both ways."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.errors import UnsupportedParameter
from gateway.endpoints.responses.answer import output_items
from gateway.endpoints.responses.request import Refused, chat_messages, chat_request, input_items
from generated.models import ChatCompletionRequest, ResponseCreateRequest


def request(**fields) -> dict:
    body = {"model": "fake/m", "input": "Hi"} | fields
    ResponseCreateRequest.model_validate(body)  # every request here is one the contract takes
    return body


def chat(**fields) -> dict:
    body = chat_request(request(**fields))
    ChatCompletionRequest.model_validate(body)
    return body


def test_a_string_input_is_one_user_message_and_instructions_come_first_as_a_system_message():
    assert chat(instructions="Be brief.")["messages"] == [{"role": "system", "content": "Be brief."},
                                                          {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    assert input_items(request()) == [{"type": "message", "role": "user",
                                       "content": [{"type": "input_text", "text": "Hi"}]}]


def test_the_fields_chat_has_are_mapped():
    body = chat(max_output_tokens=7, temperature=0.5, top_p=0.9, user="u1", parallel_tool_calls=False,
                reasoning={"effort": "low"}, tool_choice={"type": "function", "name": "f"},
                tools=[{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"},
                        "strict": True}],
                text={"format": {"type": "json_schema", "name": "city", "schema": {"type": "object"}, "strict": True}},
                stream=True, metadata={"k": "v"}, store=True, truncation="disabled")
    assert body | {"messages": None} == {
        "model": "fake/m", "messages": None, "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9,
        "user": "u1", "parallel_tool_calls": False, "reasoning_effort": "low",
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                                                    "parameters": {"type": "object"}, "strict": True}}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": {"type": "object"},
                                                                   "strict": True}},
        "stream": True, "stream_options": {"include_usage": True}}
    assert chat(text={"format": {"type": "json_object"}})["response_format"] == {"type": "json_object"}
    assert "response_format" not in chat(text={"format": {"type": "text"}})


@pytest.mark.parametrize("tool", ["web_search", "file_search", "code_interpreter", "computer_use_preview",
                                  "image_generation", "mcp", "local_shell"])
def test_a_built_in_tool_is_refused_naming_it(tool):
    with pytest.raises(Refused) as refused:
        chat_request(request(tools=[{"type": "function", "name": "f"}, {"type": tool}]))
    assert refused.value.param == "tools[1]" and tool in refused.value.why
    error = refused.value.error("anthropic")
    assert isinstance(error, UnsupportedParameter) and (error.param, error.vendor) == ("tools[1]", "anthropic")


@pytest.mark.parametrize(("fields", "param"), [
    ({"include": ["reasoning.encrypted_content"]}, "include[0]"),
    ({"truncation": "auto"}, "truncation"),
    ({"text": {"verbosity": "low"}}, "text.verbosity"),
    ({"reasoning": {"summary": "auto"}}, "reasoning.summary"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]}, "input[0].content[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]},
     "input[0].content[0].file_id"),
    ({"input": [{"role": "system", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "input[0].content[0]"),
    ({"input": []}, "input"),
])
def test_what_chat_cannot_carry_is_refused_by_name(fields, param):
    with pytest.raises(Refused) as refused:
        chat_request(request(**fields))
    assert refused.value.param == param


def test_items_become_messages_with_images_calls_and_results():
    items = [{"role": "user", "content": [{"type": "input_text", "text": "see"},
                                          {"type": "input_image", "image_url": "data:image/png;base64,AA==",
                                           "detail": "low"}]},
             {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
              "content": [{"type": "output_text", "text": "calling", "annotations": []}]},
             {"type": "function_call", "call_id": "toolu_1", "name": "f", "arguments": "{}"},
             {"type": "function_call", "call_id": "toolu_2", "name": "g", "arguments": "{\"a\":1}"},
             {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
             {"type": "function_call_output", "call_id": "toolu_1", "output": "1"},
             {"type": "function_call_output", "call_id": "toolu_2", "output": [{"type": "input_text", "text": "2"}]},
             {"role": "developer", "content": "now answer"}]
    body = chat(input=items)
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "see"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA==",
                                                                         "detail": "low"}}]},
        {"role": "assistant", "content": "calling", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "toolu_2", "type": "function", "function": {"name": "g", "arguments": "{\"a\":1}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "1"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": [{"type": "text", "text": "2"}]},
        {"role": "developer", "content": "now answer"}]


def test_the_stored_conversation_comes_after_the_instructions_and_before_the_input():
    history = [{"type": "message", "id": "msg_a", "role": "user", "content": [{"type": "input_text", "text": "1"}]},
               {"type": "message", "id": "msg_b", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "2", "annotations": []}]}]
    body = chat_request(request(instructions="new", previous_response_id="resp_1"), history)
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    assert body["messages"][2] == {"role": "assistant", "content": "2"}


call_ids = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(call_ids, min_size=1, max_size=3, unique=True), st.booleans()), max_size=5))
def test_call_ids_survive_items_to_messages_and_back(turns):
    """Any turns of calls (each with or without text before it) and their outputs: the chat
    messages carry every call id, and the assistant messages read back as items give them again."""
    items: list[dict] = [{"role": "user", "content": "go"}]
    for ids, said in turns:
        if said:
            items.append({"type": "message", "role": "assistant", "content": "thinking"})
        items += [{"type": "function_call", "call_id": i, "name": "f", "arguments": "{}"} for i in ids]
        items += [{"type": "function_call_output", "call_id": i, "output": "ok"} for i in ids]
    messages = chat_messages(items, "input")
    back = [item for m in messages if m["role"] == "assistant" for item in output_items(m)]
    assert [i["call_id"] for i in back if i["type"] == "function_call"] == [i for ids, _ in turns for i in ids]
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == [i for ids, _ in turns for i in ids]
