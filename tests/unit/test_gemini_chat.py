"""vendors/gemini/chat.py in-process: the GenerateContentRequest a chat call becomes, what it
refuses, and its reader against arbitrary answers (hypothesis): it either refuses with its typed
error or gives chat choices the gateway can relay (within n, tool calls with ids and names, chat
logprobs)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.chat import ChatCall, ChatChoice
from gateway.vendors.gemini import chat as gemini_chat
from gateway.vendors import untrusted as read
from tests.support.vendor_answers import GEMINI_CANDIDATE, LOGPROB, fields, maybe

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
USER = [{"role": "user", "content": "x"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def call(messages=USER, **parameters) -> ChatCall:
    return ChatCall("gem", messages, parameters)


@pytest.mark.parametrize(("choice", "sent"), [
    ("none", {"mode": "NONE"}),
    ("auto", {"mode": "AUTO"}),
    ("required", {"mode": "ANY"}),
    ({"type": "function", "function": {"name": "f"}}, {"mode": "ANY", "allowedFunctionNames": ["f"]}),
])
def test_tool_choice(choice, sent):
    payload = gemini_chat.chat_payload(call(tools=[TOOL], tool_choice=choice))
    assert payload["toolConfig"] == {"functionCallingConfig": sent}
    assert payload["tools"] == [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object"}}]}]


@pytest.mark.parametrize(("format_", "config"), [
    ({"type": "json_object"}, {"responseMimeType": "application/json"}),
    ({"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}},
     {"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}}),
    ({"type": "json_schema", "json_schema": {"name": "s"}}, {"responseMimeType": "application/json"}),
])
def test_response_format(format_, config):
    assert gemini_chat.chat_payload(call(response_format=format_))["generationConfig"] == config


def test_generation_config():
    payload = gemini_chat.chat_payload(call(n=3, max_tokens=9, max_completion_tokens=4, seed=2**40, logprobs=True,
                                            top_logprobs=0, stop="s"))
    assert payload["generationConfig"] == {"maxOutputTokens": 4, "candidateCount": 3, "stopSequences": ["s"],
                                           "seed": 0, "responseLogprobs": True, "logprobs": 0}
    assert "generationConfig" not in gemini_chat.chat_payload(call())


def test_a_tool_result_is_named_after_the_call_it_answers():
    messages = [*USER, {"role": "assistant", "content": "ok", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "done"}, {"role": "user", "content": "and?"}]
    assert gemini_chat.chat_payload(call(messages))["contents"][1:] == [
        {"role": "model", "parts": [{"text": "ok"}, {"functionCall": {"name": "f", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"content": "done"}}},
                                   {"text": "and?"}]}]
    assert gemini_chat.refused(call(messages)) is None


@pytest.mark.parametrize(("messages", "why"), [
    ([{"role": "tool", "tool_call_id": "a", "content": "x"}], "answers no tool call"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}], "inline"),
    ([{"role": "user", "content": "x", "name": "ann"}], "participant names"),
    ([{"role": "system", "content": "s"}, {"role": "user", "content": ""}], "needs contents"),
])
def test_what_generate_content_cannot_take_is_refused(messages, why):
    param, reason = gemini_chat.refused(call(messages))
    assert param == "messages" and why in reason


CALL_PART = fields(functionCall=fields(name=st.text(max_size=5), id=st.one_of(st.none(), st.text(max_size=4)),
                                       args=st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
CANDIDATE = st.one_of(GEMINI_CANDIDATE, fields(
    index=st.integers(0, 2), finishReason=st.sampled_from(["STOP", "MAX_TOKENS", "MALFORMED_FUNCTION_CALL"]),
    content=fields(parts=st.lists(st.one_of(CALL_PART, fields(text=st.text(max_size=4))), max_size=3)),
    logprobsResult=fields(chosenCandidates=st.lists(fields(token=st.text(max_size=4), logProbability=LOGPROB),
                                                    max_size=2))))
RESPONSE = fields(candidates=st.lists(CANDIDATE, max_size=3))


@FAST
@given(n=st.integers(1, 3), logprobs=st.booleans(), streamed=st.booleans(),
       responses=st.lists(maybe(RESPONSE), min_size=1, max_size=3))
def test_the_reader_gives_chat_choices_or_refuses(n, logprobs, streamed, responses):
    reader = gemini_chat.ChatReader(call(n=n, logprobs=logprobs, top_logprobs=2), streamed)
    seen: dict[int, int] = {}
    for response in responses:
        try:
            choices = reader.read(response)
        except read.Malformed:
            return
        for choice in choices:
            assert isinstance(choice, ChatChoice) and 0 <= choice.index < n
            for tool_call in choice.tool_calls or ():
                assert tool_call["id"] and tool_call["function"]["name"]
                assert isinstance(orjson.loads(tool_call["function"]["arguments"]), dict)
                if streamed:  # indexes run on across a stream's events, per choice
                    assert tool_call["index"] == seen.get(choice.index, 0)
                    seen[choice.index] = tool_call["index"] + 1
            if choice.logprobs is not None:
                assert logprobs and all(len(t["top_logprobs"]) <= 2 for t in choice.logprobs["content"])
            orjson.dumps([choice.tool_calls, choice.logprobs])


def test_a_malformed_function_call_is_the_vendors_failure():
    reader = gemini_chat.ChatReader(call(tools=[TOOL]), streamed=False)
    with pytest.raises(read.Malformed, match="MALFORMED_FUNCTION_CALL"):
        reader.read({"candidates": [{"index": 0, "finishReason": "MALFORMED_FUNCTION_CALL",
                                     "content": {"parts": [{"text": ""}]}}]})


@pytest.mark.parametrize(("effort", "budget"), [("none", 0), ("low", 1024), ("medium", 8192), ("high", 24576)])
def test_reasoning_effort_is_a_thinking_budget(effort, budget):
    assert gemini_chat.chat_payload(call(reasoning_effort=effort))["generationConfig"] == {
        "thinkingConfig": {"thinkingBudget": budget}}
    assert gemini_chat.refused(call(reasoning_effort=effort)) is None


@pytest.mark.parametrize("effort", ["minimal", "xhigh"])
def test_an_effort_without_a_documented_budget_is_refused(effort):
    param, why = gemini_chat.refused(call(reasoning_effort=effort))
    assert param == "reasoning_effort" and effort in why


def test_a_function_name_gemini_cannot_declare_is_refused():
    tool = {"type": "function", "function": {"name": "1st"}}
    assert gemini_chat.refused(call(tools=[tool]))[0] == "tools"
    assert gemini_chat.refused(call(tools=[TOOL])) is None
