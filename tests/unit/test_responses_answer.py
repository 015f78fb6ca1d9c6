"""gateway/endpoints/responses/answer.py: a chat completion's answer as the contract's `response`."""

from __future__ import annotations

import pytest

from gateway.endpoints.responses.answer import MAX_OUTPUT_ITEMS, Unexpected, output_text, response_from_chat, shell
from openai.types.responses import Response as OpenAIResponse
from scale_gp_beta.types.response_create_response import OpenAIResponse as SGPResponse

from generated.models import Response

REQUEST = {"model": "fake/m", "input": "Hi", "instructions": "Be brief.", "metadata": {"k": "v"},
           "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]}


def completion(message: dict, finish_reason: str = "stop", usage: dict | None = None) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant"} | message, "finish_reason": finish_reason,
                         "logprobs": None}],
            "usage": usage or {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13,
                               "prompt_tokens_details": {"cached_tokens": 2},
                               "completion_tokens_details": {"reasoning_tokens": 1}}}


def answer(message: dict, finish_reason: str = "stop") -> dict:
    made = response_from_chat(REQUEST, completion(message, finish_reason), response_id="resp_1",
                              created_at=1_700_000_000, model="fake/m")
    Response.model_validate(made)
    OpenAIResponse.model_validate(made)  # the openai SDK's own type, validated strictly
    SGPResponse.model_validate(made)  # and scale-gp-beta's
    return made


def test_text_is_one_message_with_one_output_text_part_and_the_usage_in_responses_terms():
    made = answer({"content": "Paris."})
    assert made["id"] == "resp_1" and made["status"] == "completed" and made["incomplete_details"] is None
    [message] = made["output"]
    assert message["id"].startswith("msg_") and message["status"] == "completed"
    assert message["content"] == [{"type": "output_text", "text": "Paris.", "annotations": []}]
    assert output_text(made) == "Paris."
    assert made["usage"] == {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
                             "output_tokens": 4,
                             "output_tokens_details": {"reasoning_tokens": 1}, "total_tokens": 13}
    assert (made["instructions"], made["metadata"], made["store"]) == ("Be brief.", {"k": "v"}, True)


def test_tool_calls_are_function_call_items_keeping_the_vendors_call_ids():
    made = answer({"content": None, "tool_calls": [
        {"id": "toolu_01", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":1}"}},
        {"id": "toolu_02", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}, "tool_calls")
    assert [(i["type"], i["call_id"], i["arguments"]) for i in made["output"]] == [
        ("function_call", "toolu_01", "{\"q\":1}"), ("function_call", "toolu_02", "{}")]
    assert all(i["id"].startswith("fc_") for i in made["output"])
    assert len({i["id"] for i in made["output"]}) == 2


def test_a_refusal_is_a_refusal_part():
    made = answer({"content": None, "refusal": "I can't."})
    assert made["output"][0]["content"] == [{"type": "refusal", "refusal": "I can't."}]


@pytest.mark.parametrize(("finish", "reason"), [("length", "max_output_tokens"), ("content_filter", "content_filter")])
def test_a_cut_answer_is_incomplete_with_its_reason(finish, reason):
    made = answer({"content": "Par"}, finish)
    assert made["status"] == "incomplete" and made["incomplete_details"] == {"reason": reason}
    assert made["output"][0]["status"] == "incomplete"


def test_the_shell_echoes_openais_defaults():
    empty = shell({"model": "fake/m", "input": "x"}, response_id="resp_2", created_at=0, model="fake/m")
    assert (empty["parallel_tool_calls"], empty["tool_choice"], empty["tools"], empty["truncation"],
            empty["text"], empty["metadata"], empty["store"]) == (True, "auto", [], "disabled",
                                                                   {"format": {"type": "text"}}, {}, True)
    Response.model_validate(empty)


def test_more_tool_calls_than_the_contract_carries_are_unexpected():
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
             for i in range(MAX_OUTPUT_ITEMS)]
    with pytest.raises(Unexpected):
        response_from_chat(REQUEST, completion({"content": "x", "tool_calls": calls}, "tool_calls"),
                           response_id="resp_1", created_at=1, model="fake/m")
