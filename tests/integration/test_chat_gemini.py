"""POST /v5/chat/completions on the gemini protocol: the openai SDK against the gateway in front of
the fake Gemini API (tests/support/fakes/gemini_upstream.py checks every request's shape; `vclient`
fails a test whose request broke it). Vendor `gemini` takes up to 4 candidates per call, `gemini1`
one (tests/support/environments.py)."""

from __future__ import annotations

import json

import openai
import pytest

from tests.support.bodies import sse_events
from tests.support.chat import TOOLS, USER, assert_failure_unbilled, assert_refused, per_choice
from tests.support.chat import row as ledger_row
from tests.support.fakes.gemini_upstream import SIGNATURE

SCHEMA = {"type": "object", "properties": {"said": {"type": "string"}}, "required": ["said"],
          "additionalProperties": False}


@pytest.fixture
def oai(vclient, vendors_gateway, database):
    return openai.OpenAI(api_key=database.key, base_url=f"{vendors_gateway.url}/v5", max_retries=0)


def _sent(gemini_upstream, calls=1):
    assert len(gemini_upstream.requests) == calls
    return gemini_upstream.requests[0]


def test_plain_chat_maps_the_conversation_and_parameters_to_generate_content(oai, gemini_upstream):
    messages = [{"role": "system", "content": "be brief"}, {"role": "developer", "content": "and kind"}, *USER]
    answer = oai.chat.completions.create(model="gemini/gem-x", messages=messages, max_tokens=3, temperature=1.5,
                                         top_p=0.9, stop="zz", presence_penalty=0.5, frequency_penalty=0.25,
                                         user="u-1", extra_body={"top_k": 5})
    choice = answer.choices[0]
    assert (choice.message.role, choice.message.content, choice.finish_reason) == ("assistant", " w0 w1 w2", "length")
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (6, 3)
    sent = _sent(gemini_upstream)
    assert sent["path"] == "/v1beta/models/gem-x:generateContent"
    assert sent["body"] == {
        "systemInstruction": {"parts": [{"text": "be brief\n\nand kind"}]},
        "contents": [{"role": "user", "parts": [{"text": "hello there"}]}],
        "generationConfig": {"maxOutputTokens": 3, "stopSequences": ["zz"], "temperature": 1.5, "topP": 0.9,
                             "topK": 5, "presencePenalty": 0.5, "frequencyPenalty": 0.25},
    }  # fmt: skip


def test_same_role_turns_are_merged_and_images_go_inline(oai, gemini_upstream):
    messages = [{"role": "user", "content": "first"},
                {"role": "user", "content": [{"type": "text", "text": "look"},
                                             {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]},
                {"role": "assistant", "content": "seen"}, {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                {"role": "user", "content": "again"}]
    oai.chat.completions.create(model="gemini/gem-x", messages=messages, max_tokens=1)
    assert _sent(gemini_upstream)["body"]["contents"] == [
        {"role": "user", "parts": [{"text": "first"}, {"text": "look"},
                                   {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}]},
        {"role": "model", "parts": [{"text": "seen"}, {"text": "ok"}]},
        {"role": "user", "parts": [{"text": "again"}]},
    ]


def test_streamed_with_usage(oai, gemini_upstream):
    chunks = list(oai.chat.completions.create(model="gemini/thinking", messages=USER, max_tokens=3, stream=True,
                                              stream_options={"include_usage": True}))
    pieces = [choice for chunk in chunks[:-1] for choice in chunk.choices]
    assert pieces[0].delta.role == "assistant"
    assert "".join(p.delta.content or "" for p in pieces) == " w0 w1 w2"  # not the thought
    assert [p.finish_reason for p in pieces if p.finish_reason] == ["length"]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and (usage.prompt_tokens, usage.completion_tokens) == (2, 3 + 5)
    assert usage.completion_tokens_details.reasoning_tokens == 5
    assert gemini_upstream.requests[0]["path"] == "/v1beta/models/thinking:streamGenerateContent"


def test_stop_and_seed(oai, gemini_upstream):
    answer = oai.chat.completions.create(model="gemini/gem-x", messages=USER, max_tokens=9, stop=[" s7w2"], seed=7)
    assert (answer.choices[0].message.content, answer.choices[0].finish_reason) == (" s7w0 s7w1", "stop")
    assert _sent(gemini_upstream)["body"]["generationConfig"]["seed"] == 7


def test_n_is_candidate_count_up_to_the_vendors_limit_then_fanned_out(oai, gemini_upstream, database):
    raw = oai.chat.completions.with_raw_response.create(model="gemini/gem-x", messages=USER, n=6, max_tokens=1,
                                                        seed=5)
    answer = raw.parse()
    assert [c.index for c in answer.choices] == list(range(6))
    # Two calls: 4 candidates with seed 5, then 2 with seed 9 (choice i samples with seed + i).
    assert [c.message.content for c in answer.choices] == [f" s5c{i}w0" for i in range(4)] + \
        [f" s9c{i}w0" for i in range(2)]
    configs = sorted((r["body"]["generationConfig"]["candidateCount"], r["body"]["generationConfig"]["seed"])
                     for r in gemini_upstream.requests)
    assert configs == [(2, 9), (4, 5)]
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (2, 6)
    row = ledger_row(database.url, raw.headers["x-request-id"])
    assert row["endpoint"] == "chat" and (row["prompt_tokens"], row["completion_tokens"]) == (4, 6)


def test_n_on_a_one_candidate_vendor_streams_each_choice_apart(oai, gemini_upstream):
    chunks = list(oai.chat.completions.create(model="gemini1/gem-x", messages=USER, n=2, max_tokens=2, stream=True,
                                              stream_options={"include_usage": True}))
    pieces_of = per_choice(chunks[:-1])
    assert sorted(pieces_of) == [0, 1]
    for pieces in pieces_of.values():
        assert "".join(p.delta.content or "" for p in pieces) == " w0 w1"
        assert [p.finish_reason for p in pieces if p.finish_reason] == ["length"]
    assert len(gemini_upstream.requests) == 2
    assert all("candidateCount" not in r["body"]["generationConfig"] for r in gemini_upstream.requests)
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (2, 4)


@pytest.mark.parametrize(("tool_choice", "calling", "calls"), [
    ("required", {"mode": "ANY"}, ["lookup"]),
    ({"type": "function", "function": {"name": "fetch"}}, {"mode": "ANY", "allowedFunctionNames": ["fetch"]},
     ["fetch"]),
    ("none", {"mode": "NONE"}, []),
    (None, None, ["lookup"]),
])
def test_tools_and_tool_choice_map_to_function_calling(oai, gemini_upstream, tool_choice, calling, calls):
    extra = {} if tool_choice is None else {"tool_choice": tool_choice}
    answer = oai.chat.completions.create(model="gemini/gem-x", messages=USER, tools=TOOLS, max_tokens=2, **extra)
    choice = answer.choices[0]
    assert [c.function.name for c in choice.message.tool_calls or []] == calls
    assert choice.finish_reason == ("tool_calls" if calls else "length")
    for call in choice.message.tool_calls or []:
        assert call.id == "call_0" and json.loads(call.function.arguments) == {"said": "hello there"}
    body = _sent(gemini_upstream)["body"]
    assert body["tools"] == [{"functionDeclarations": [
        {"name": t["function"]["name"], "description": t["function"]["description"],
         "parametersJsonSchema": t["function"]["parameters"]} for t in TOOLS]}]
    assert body.get("toolConfig") == (None if calling is None else {"functionCallingConfig": calling})


def test_streamed_function_calls_are_tool_call_deltas_with_stable_indexes(oai):
    chunks = list(oai.chat.completions.create(model="gemini/two-tools", messages=USER, tools=TOOLS, stream=True))
    deltas = [d for c in chunks for ch in c.choices for d in (ch.delta.tool_calls or [])]
    assert [(d.index, d.id, d.function.name) for d in deltas] == [(0, "call_0", "lookup"), (1, "call_1", "fetch")]
    assert all(json.loads(d.function.arguments) == {"said": "hello there"} for d in deltas)
    assert [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason] == ["tool_calls"]


def test_a_tool_conversation_becomes_function_call_and_response_parts(oai, gemini_upstream):
    messages = [*USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": '{"said": "x"}'}},
        {"id": "call_1", "type": "function", "function": {"name": "fetch", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "found"},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "fetched"}]}]
    answer = oai.chat.completions.create(model="gemini/gem-x", messages=messages, tools=TOOLS, max_tokens=1)
    assert answer.choices[0].message.content == " w0"
    assert _sent(gemini_upstream)["body"]["contents"] == [
        {"role": "user", "parts": [{"text": "hello there"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "lookup", "args": {"said": "x"}}},
                                    {"functionCall": {"name": "fetch", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "lookup", "response": {"content": "found"}}},
                                   {"functionResponse": {"name": "fetch", "response": {"content": "fetched"}}}]},
    ]  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_is_response_json_schema_and_the_answer_parses(oai, gemini_upstream, stream):
    format_ = {"type": "json_schema", "json_schema": {"name": "said", "schema": SCHEMA, "strict": True}}
    answer = oai.chat.completions.create(model="gemini/gem-x", messages=USER, response_format=format_, stream=stream)
    content = "".join(ch.delta.content or "" for c in answer for ch in c.choices) if stream \
        else answer.choices[0].message.content
    assert json.loads(content) == {"said": "hello there"}
    config = _sent(gemini_upstream)["body"]["generationConfig"]
    assert config == {"responseMimeType": "application/json", "responseJsonSchema": SCHEMA}


@pytest.mark.parametrize(("model", "format_"), [
    ("bad-json", {"type": "json_object"}),
    ("bad-json", {"type": "json_schema", "json_schema": {"name": "said", "schema": SCHEMA}}),
    ("off-schema", {"type": "json_schema", "json_schema": {"name": "said", "schema": SCHEMA, "strict": True}}),
])
def test_json_that_does_not_parse_or_match_is_the_vendors_failure(vclient, model, format_):
    answer = vclient.post("/v5/chat/completions", json={"model": f"gemini/{model}", "messages": USER,
                                                        "response_format": format_})
    assert answer.status_code == 502, answer.text
    assert "JSON" in answer.json()["error"]["message"]


def test_reasoning_effort_is_a_thinking_budget(oai, gemini_upstream):
    answer = oai.chat.completions.create(model="gemini/thinking", messages=USER, max_tokens=2,
                                         reasoning_effort="low")
    assert answer.usage.completion_tokens_details.reasoning_tokens == 5
    assert _sent(gemini_upstream)["body"]["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 1024}


def test_logprobs_come_in_the_chat_shape(oai, gemini_upstream):
    answer = oai.chat.completions.create(model="gemini/gem-x", messages=USER, max_tokens=2, logprobs=True,
                                         top_logprobs=2)
    content = answer.choices[0].logprobs.content
    assert [t.token for t in content] == [" w0", " w1"]
    assert all(len(t.top_logprobs) == 2 and t.top_logprobs[0].token == t.token for t in content)
    config = _sent(gemini_upstream)["body"]["generationConfig"]
    assert (config["responseLogprobs"], config["logprobs"]) == (True, 2)


@pytest.mark.parametrize("top", [None, 0], ids=["absent", "zero"])
def test_logprobs_without_alternatives_give_each_token_its_entry(oai, gemini_upstream, top):
    asked = {} if top is None else {"top_logprobs": top}
    answer = oai.chat.completions.create(model="gemini/gem-x", messages=USER, max_tokens=2, logprobs=True, **asked)
    content = answer.choices[0].logprobs.content
    assert [(t.token, t.top_logprobs) for t in content] == [(" w0", []), (" w1", [])]
    assert _sent(gemini_upstream)["body"]["generationConfig"].get("logprobs") == top


@pytest.mark.parametrize(("extra", "param"), [
    ({"parallel_tool_calls": False, "tools": TOOLS}, "parallel_tool_calls"),
    ({"logit_bias": {"1": 5}}, "logit_bias"),
    ({"metadata": {"a": "b"}}, "metadata"),
    ({"reasoning_effort": "xhigh"}, "reasoning_effort"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]}]},
     "messages"),
    ({"messages": [{"role": "user", "content": "hi", "name": "ann"}]}, "messages"),
    ({"messages": [*USER, {"role": "tool", "tool_call_id": "call_9", "content": "x"}]}, "messages"),
])
def test_what_generate_content_lacks_is_refused_by_name(vclient, gemini_upstream, extra, param):
    answer = vclient.post("/v5/chat/completions", json={"model": "gemini/gem-x", "messages": USER} | extra)
    assert_refused(answer, param, "gemini")
    assert gemini_upstream.requests == []


def test_a_vendor_failure_is_a_502(oai, database):
    assert_failure_unbilled(oai, database.url, "gemini/fail-500")


def test_the_ledger_row_is_the_chat_endpoints(oai, database):
    raw = oai.chat.completions.with_raw_response.create(model="gemini/gem-x", messages=USER, max_tokens=2)
    row = ledger_row(database.url, raw.headers["x-request-id"])
    assert (row["endpoint"], row["vendor"], row["prompt_tokens"], row["completion_tokens"]) == ("chat", "gemini", 2, 2)


def test_the_vendors_list_says_what_each_chat_parameter_gets_on_gemini(vclient):
    vendors = {v["name"]: v["chat_parameters"] for v in vclient.get("/v5/vendors").json()["data"]}
    assert vendors["gemini"]["n"]["support"] == "native" and vendors["gemini1"]["n"]["support"] == "emulated"
    assert vendors["gemini"]["response_format"]["support"] == "native"
    assert vendors["gemini"]["parallel_tool_calls"]["support"] == "unsupported"


def test_a_function_calls_thought_signature_goes_back_with_the_call(oai, gemini_upstream):
    answer = oai.chat.completions.create(model="gemini/signed", messages=USER, tools=TOOLS)
    (call,) = answer.choices[0].message.tool_calls
    assert call.id == "call_0~" + SIGNATURE and call.function.name == "lookup"
    messages = [*USER, answer.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "found"}]
    gemini_upstream.clear()
    again = oai.chat.completions.create(model="gemini/signed", messages=messages, tools=TOOLS, max_tokens=1)
    assert again.choices[0].message.content == " w0"  # the fake found its signature (vclient checks)
    assert gemini_upstream.requests[0]["body"]["contents"][1]["parts"] == [
        {"functionCall": {"name": "lookup", "args": {"said": "hello there"}}, "thoughtSignature": SIGNATURE}]


def test_a_blocked_prompt_is_content_filter(oai):
    answer = oai.chat.completions.create(model="gemini/blocked", messages=USER, n=2)
    assert [(c.index, c.finish_reason, c.message.content) for c in answer.choices] == [
        (0, "content_filter", ""), (1, "content_filter", "")]


@pytest.mark.parametrize("model", ["extra-candidates", "index-beyond"])
def test_candidates_beyond_those_asked_for_are_the_vendors_failure(vclient, model):
    answer = vclient.post("/v5/chat/completions", json={"model": f"gemini/{model}", "messages": USER, "n": 2})
    assert answer.status_code == 502, answer.text


def test_a_stream_cut_before_every_candidate_finished_ends_with_an_error_event(vclient):
    answer = vclient.post("/v5/chat/completions", json={"model": "gemini/cut-stream", "messages": USER,
                                                        "max_tokens": 3, "stream": True})
    assert answer.status_code == 200
    errors = [json.loads(e["data"])["error"] for e in sse_events(answer.text)
              if e["data"].startswith("{") and '"error"' in e["data"]]
    assert len(errors) == 1 and "before every candidate finished" in errors[0]["message"]


def test_a_deprecated_function_conversation_is_function_parts(oai, gemini_upstream):
    messages = [*USER, {"role": "assistant", "content": None,
                        "function_call": {"name": "fetch", "arguments": '{"said": "x"}'}},
                {"role": "function", "name": "fetch", "content": "fetched"}]
    functions = [tool["function"] for tool in TOOLS]
    answer = oai.chat.completions.create(model="gemini/gem-x", messages=messages, functions=functions,
                                         function_call={"name": "lookup"}, max_tokens=1)
    assert answer.choices[0].message.function_call.name == "lookup"  # forced (mode ANY), even after an answer
    body = _sent(gemini_upstream)["body"]
    assert body["contents"][1:] == [
        {"role": "model", "parts": [{"functionCall": {"name": "fetch", "args": {"said": "x"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "fetch", "response": {"content": "fetched"}}}]}]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["lookup"]}}


def test_several_calls_to_the_deprecated_functions_are_the_vendors_failure(vclient):
    functions = [tool["function"] for tool in TOOLS]
    answer = vclient.post("/v5/chat/completions", json={"model": "gemini/two-tools", "messages": USER,
                                                        "functions": functions})
    assert answer.status_code == 502 and "function_call cannot carry" in answer.json()["error"]["message"]
