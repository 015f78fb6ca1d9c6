"""POST /v5/chat/completions on the anthropic protocol: the openai SDK against the gateway in front
of the fake Messages API (tests/support/fakes/anthropic_upstream.py checks every request's shape;
`vclient` fails a test whose request broke it)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.support.bodies import chunks_of
from tests.support.chat import TOOLS, USER, assert_failure_unbilled, assert_refused, per_choice
from tests.support.chat import row as ledger_row
from tests.support.environments import ANTHROPIC_SECRET, SHARED_TLS
from tests.support.processes import wait_until
from tests.support.provision import new_key, run_cli

PIXEL = "data:image/png;base64,iVBORw0KGgo="
SCHEMA = {"type": "object", "properties": {"said": {"type": "string"}}, "required": ["said"],
          "additionalProperties": False}


@pytest.fixture
def oai(vclient, vendors_gateway, database):
    return openai.OpenAI(api_key=database.key, base_url=f"{vendors_gateway.url}/v5", max_retries=0)


def _sent(anthropic_upstream, calls=1):
    assert len(anthropic_upstream.requests) == calls
    return anthropic_upstream.requests[0]["body"]


def test_plain_chat_maps_the_conversation_and_parameters_to_the_messages_api(oai, anthropic_upstream):
    messages = [{"role": "system", "content": "be brief"}, {"role": "developer", "content": "and kind"}, *USER]
    answer = oai.chat.completions.create(model="anthropic/claude-x", messages=messages, max_tokens=3,
                                         temperature=0.5, top_p=0.9, stop="zz", user="u-1",
                                         extra_body={"top_k": 5})
    assert answer.object == "chat.completion" and answer.model == "anthropic/claude-x"
    choice = answer.choices[0]
    assert (choice.message.role, choice.message.content, choice.finish_reason) == ("assistant", " w0 w1 w2", "length")
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (6, 3)
    assert answer.usage.prompt_tokens_details.cached_tokens == 0
    assert _sent(anthropic_upstream) == {
        "model": "claude-x", "max_tokens": 3, "system": "be brief\n\nand kind",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
        "stop_sequences": ["zz"], "temperature": 0.5, "top_p": 0.9, "top_k": 5, "metadata": {"user_id": "u-1"},
    }  # fmt: skip


def test_without_a_maximum_the_documented_default_is_sent(oai, anthropic_upstream):
    oai.chat.completions.create(model="anthropic/claude-x", messages=USER, stop=[" w1"])
    assert _sent(anthropic_upstream)["max_tokens"] == 4096
    anthropic_upstream.clear()
    oai.chat.completions.create(model="anthropic/claude-x", messages=USER, max_completion_tokens=2)
    assert _sent(anthropic_upstream)["max_tokens"] == 2  # (with max_tokens too: a 400, test_chat_mistakes.py)


def test_stop_ends_the_choice_with_stop(oai):
    answer = oai.chat.completions.create(model="anthropic/claude-x", messages=USER, max_tokens=9, stop=[" w2"])
    assert (answer.choices[0].message.content, answer.choices[0].finish_reason) == (" w0 w1", "stop")


def test_same_role_turns_are_merged_and_images_become_image_blocks(oai, anthropic_upstream):
    messages = [{"role": "user", "content": "first"},
                {"role": "user", "content": [{"type": "text", "text": "look"},
                                             {"type": "image_url", "image_url": {"url": PIXEL}},
                                             {"type": "image_url", "image_url": {"url": "https://x.test/a.jpg"}}]},
                {"role": "assistant", "content": "seen"}, {"role": "assistant", "content": "twice"},
                {"role": "user", "content": "again"}]
    oai.chat.completions.create(model="anthropic/claude-x", messages=messages, max_tokens=1)
    assert _sent(anthropic_upstream)["messages"] == [
        {"role": "user", "content": [
            {"type": "text", "text": "first"}, {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "seen"}, {"type": "text", "text": "twice"}]},
        {"role": "user", "content": [{"type": "text", "text": "again"}]},
    ]  # fmt: skip


def test_streamed_with_usage_counts_cache_reads_and_writes(oai):
    chunks = list(oai.chat.completions.create(model="anthropic/cached", messages=USER, max_tokens=3, stream=True,
                                              stream_options={"include_usage": True}))
    pieces = [choice for chunk in chunks[:-1] for choice in chunk.choices]
    assert pieces[0].delta.role == "assistant" and {p.index for p in pieces} == {0}
    assert "".join(p.delta.content or "" for p in pieces) == " w0 w1 w2"
    assert [p.finish_reason for p in pieces if p.finish_reason] == ["length"]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens == 3
    assert usage.prompt_tokens == 2 + 7 + 3 and usage.prompt_tokens_details.cached_tokens == 7


def test_tools_and_tool_choice_map_to_tool_use(oai, anthropic_upstream):
    answer = oai.chat.completions.create(model="anthropic/claude-x", messages=USER, tools=TOOLS,
                                         tool_choice="required")
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None  # a forced call says nothing
    (call,) = choice.message.tool_calls
    assert (call.id, call.type, call.function.name) == ("toolu_0", "function", "lookup")
    assert json.loads(call.function.arguments) == {"said": "hello there"}
    sent = _sent(anthropic_upstream)
    assert sent["tool_choice"] == {"type": "any"}
    assert sent["tools"][0] == {"name": "lookup", "description": "the lookup tool",
                                "input_schema": TOOLS[0]["function"]["parameters"]}


@pytest.mark.parametrize(("tool_choice", "parallel", "sent", "calls"), [
    ({"type": "function", "function": {"name": "fetch"}}, False,
     {"type": "tool", "name": "fetch", "disable_parallel_tool_use": True}, 1),
    ("none", None, {"type": "none"}, 0),
    ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}, 1),
    ("auto", None, None, 2),  # Anthropic's default
])
def test_tool_choice_and_parallel_tool_calls(oai, anthropic_upstream, tool_choice, parallel, sent, calls):
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    answer = oai.chat.completions.create(model="anthropic/two-tools", messages=USER, tools=TOOLS,
                                         tool_choice=tool_choice, max_tokens=2, **extra)
    assert _sent(anthropic_upstream).get("tool_choice") == sent
    assert len(answer.choices[0].message.tool_calls or []) == calls


def test_streamed_tool_calls_are_deltas_with_stable_indexes(oai):
    chunks = list(oai.chat.completions.create(model="anthropic/two-tools", messages=USER, tools=TOOLS, stream=True))
    deltas = [d for c in chunks for ch in c.choices for d in (ch.delta.tool_calls or [])]
    for index, (call_id, name) in enumerate([("toolu_0", "lookup"), ("toolu_1", "fetch")]):
        mine = [d for d in deltas if d.index == index]
        assert (mine[0].id, mine[0].function.name) == (call_id, name)
        assert all(d.id is None and d.function.name is None for d in mine[1:])
        assert json.loads("".join(d.function.arguments or "" for d in mine)) == {"said": "hello there"}
    assert "".join(ch.delta.content or "" for c in chunks for ch in c.choices) == "Let me look."
    assert [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason] == ["tool_calls"]


def test_a_tool_conversation_becomes_tool_use_and_tool_result_blocks(oai, anthropic_upstream):
    messages = [{"role": "system", "content": "use tools"}, *USER,
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "toolu_0", "type": "function", "function": {"name": "lookup", "arguments": '{"said": "x"}'}},
                    {"id": "toolu_1", "type": "function", "function": {"name": "fetch", "arguments": ""}}]},
                {"role": "tool", "tool_call_id": "toolu_0", "content": "found"},
                {"role": "tool", "tool_call_id": "toolu_1", "content": [{"type": "text", "text": "fetched"}]},
                {"role": "user", "content": "so?"}]
    answer = oai.chat.completions.create(model="anthropic/claude-x", messages=messages, tools=TOOLS, max_tokens=1)
    assert answer.choices[0].message.content == " w0"  # the tools were answered: the model speaks
    assert _sent(anthropic_upstream)["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hello there"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_0", "name": "lookup", "input": {"said": "x"}},
            {"type": "tool_use", "id": "toolu_1", "name": "fetch", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "found"},
                                     {"type": "tool_result", "tool_use_id": "toolu_1", "content": "fetched"},
                                     {"type": "text", "text": "so?"}]},
    ]  # fmt: skip


def test_n_is_one_messages_call_per_choice_billed_per_call(oai, anthropic_upstream, vclient, database):
    raw = oai.chat.completions.with_raw_response.create(model="anthropic/claude-x", messages=USER, n=3, max_tokens=2)
    answer = raw.parse()
    assert [c.index for c in answer.choices] == [0, 1, 2]
    assert all(c.message.content == " w0 w1" for c in answer.choices)
    assert len(anthropic_upstream.requests) == 3 and all("n" not in r["body"] for r in anthropic_upstream.requests)
    # The client is told the conversation once (OpenAI's semantics); the ledger bills all three calls.
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (2, 6)
    row = ledger_row(database.url, raw.headers["x-request-id"])
    assert row["endpoint"] == "chat" and (row["prompt_tokens"], row["completion_tokens"]) == (6, 6)


def test_n_streamed_keeps_each_choice_apart(oai, anthropic_upstream):
    chunks = list(oai.chat.completions.create(model="anthropic/claude-x", messages=USER, n=2, max_tokens=2,
                                              stream=True, stream_options={"include_usage": True}))
    pieces_of = per_choice(chunks[:-1])
    assert sorted(pieces_of) == [0, 1]
    for pieces in pieces_of.values():
        assert pieces[0].delta.role == "assistant"
        assert "".join(p.delta.content or "" for p in pieces) == " w0 w1"
        assert [p.finish_reason for p in pieces if p.finish_reason] == ["length"]
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (2, 4)
    assert len(anthropic_upstream.requests) == 2


@pytest.mark.parametrize(("extra", "param"), [
    ({"seed": 1}, "seed"),
    ({"logprobs": True}, "logprobs"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"logit_bias": {"1": 5}}, "logit_bias"),
    ({"response_format": {"type": "json_object"}, "tools": TOOLS}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "array"}}}},
     "response_format"),
    ({"temperature": 1.5}, "temperature"),  # the Messages API's range is [0, 1]
    ({"messages": [{"role": "user", "content": "hi", "name": "ann"}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}]}]},
     "messages"),
])
def test_what_the_messages_api_lacks_is_refused_by_name(vclient, anthropic_upstream, extra, param):
    answer = vclient.post("/v5/chat/completions", json={"model": "anthropic/claude-x", "messages": USER} | extra)
    assert_refused(answer, param, "anthropic")
    assert anthropic_upstream.requests == []


def test_values_that_ask_for_nothing_are_served_without_the_parameter(oai, anthropic_upstream):
    answer = oai.chat.completions.create(model="anthropic/claude-x", messages=USER, max_tokens=1, n=1,
                                         response_format={"type": "text"}, logprobs=False, presence_penalty=0)
    assert answer.choices[0].message.content == " w0"
    assert set(_sent(anthropic_upstream)) == {"model", "max_tokens", "messages"}


def test_a_vendor_failure_is_a_502_and_bills_nothing(oai, vclient, database):
    assert_failure_unbilled(oai, database.url, "anthropic/fail-500")


def test_a_stream_error_event_ends_the_stream_as_the_vendors_failure(vclient):
    answer = vclient.post("/v5/chat/completions", json={"model": "anthropic/stream-error", "messages": USER,
                                                        "max_tokens": 3, "stream": True})
    assert answer.status_code == 200  # the first delta went out: the failure is an error event
    errors = [json.loads(line[6:])["error"] for line in answer.text.splitlines()
              if line.startswith("data: {") and '"error"' in line]
    assert [e["type"] for e in errors] == ["vendor_error"] and "failed mid-stream" in errors[0]["message"]


def test_the_ledger_row_is_the_chat_endpoints_with_the_vendors_tokens(oai, database):
    raw = oai.chat.completions.with_raw_response.create(model="anthropic/claude-x", messages=USER, max_tokens=2)
    row = ledger_row(database.url, raw.headers["x-request-id"])
    assert row["endpoint"] == "chat" and row["vendor"] == "anthropic"
    assert (row["prompt_tokens"], row["completion_tokens"]) == (2, 2)


def test_the_vendors_list_says_what_each_chat_parameter_gets_on_anthropic(vclient):
    vendor = next(v for v in vclient.get("/v5/vendors").json()["data"] if v["name"] == "anthropic")
    chat = vendor["chat_parameters"]
    assert chat["messages"]["support"] == "native" and chat["tools"]["support"] == "native"
    assert chat["n"]["support"] == "emulated" and chat["seed"]["support"] == "unsupported"


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_is_a_forced_tool_call_whose_input_is_the_content(oai, anthropic_upstream, stream):
    format_ = {"type": "json_schema", "json_schema": {"name": "said", "schema": SCHEMA, "strict": True}}
    answer = oai.chat.completions.create(model="anthropic/claude-x", messages=USER, response_format=format_,
                                         stream=stream)
    if stream:
        content = "".join(ch.delta.content or "" for c in answer for ch in c.choices)
    else:
        content, finish = answer.choices[0].message.content, answer.choices[0].finish_reason
        assert finish == "stop" and answer.choices[0].message.tool_calls is None
    assert json.loads(content) == {"said": "hello there"}
    sent = _sent(anthropic_upstream)
    assert sent["tools"] == [{"name": "said", "description": "Answer with this JSON.", "input_schema": SCHEMA}]
    assert sent["tool_choice"] == {"type": "tool", "name": "said"}


def test_json_object_is_any_object_and_a_strict_schema_missed_is_the_vendors_failure(vclient, anthropic_upstream):
    answer = vclient.post("/v5/chat/completions", json={"model": "anthropic/claude-x", "messages": USER,
                                                        "response_format": {"type": "json_object"}})
    assert json.loads(answer.json()["choices"][0]["message"]["content"]) == {"said": "hello there"}
    assert anthropic_upstream.requests[0]["body"]["tools"][0]["input_schema"] == {"type": "object"}
    format_ = {"type": "json_schema", "json_schema": {"name": "said", "schema": SCHEMA, "strict": True}}
    answer = vclient.post("/v5/chat/completions", json={"model": "anthropic/off-schema", "messages": USER,
                                                        "response_format": format_})
    assert answer.status_code == 502 and "strict json_schema" in answer.json()["error"]["message"]


@pytest.mark.parametrize(("model", "stream", "status", "says"), [
    ("leak-malformed", False, 502, "malformed message"),
    ("cut-stream", True, 200, "before message_stop"),
    ("fail-529", False, 502, "HTTP 529"),
])
def test_a_vendors_broken_answer_is_its_failure(vclient, model, stream, status, says):
    answer = vclient.post("/v5/chat/completions", json={"model": f"anthropic/{model}", "messages": USER,
                                                        "max_tokens": 3, "stream": stream})
    assert answer.status_code == status, answer.text
    assert says in answer.text and ANTHROPIC_SECRET not in answer.text


def test_a_refusal_is_content_filter(oai):
    assert oai.chat.completions.create(model="anthropic/refuse", messages=USER).choices[0].finish_reason == \
        "content_filter"


def test_a_budget_reserves_the_conversation_of_every_call_n_makes(vendors_gateway, vclient, database,
                                                                  anthropic_upstream):
    """Each of n's Messages calls carries the conversation and is billed for it: the limits reserve
    it once per call, before any vendor is asked."""
    key, key_id, _ = new_key(database.url)
    run_cli(database.url, "limits", "set", "--key", key_id, "--budget-tokens", "1000", "--period", "day",
            "--models", "anthropic/*")
    try:
        budgeted(key, vendors_gateway, anthropic_upstream)
    finally:  # the session's database is shared: a counted limit left in it stops gateways of two workers
        run_cli(database.url, "limits", "clear", "--key", key_id, "--all")


def budgeted(key: str, vendors_gateway, anthropic_upstream) -> None:

    def chat(**body) -> httpx.Response:
        return httpx.post(f"{vendors_gateway.url}/v5/chat/completions", headers={"x-api-key": key}, timeout=30,
                          json={"model": "anthropic/claude-x", "max_tokens": 1} | body, verify=SHARED_TLS)

    # A model of no vendor is a 404 until the limits apply, then the allow-list's 403: never served.
    wait_until(lambda: chat(model="nowhere/x", messages=USER).status_code == 403, message="the limits applied")
    messages = [{"role": "user", "content": " ".join(["a"] * 100)}]  # 100 tokens and more to the counter
    refused = chat(messages=messages, n=50)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "budget_exceeded", refused.text
    assert anthropic_upstream.requests == []
    served = chat(messages=messages, n=5)
    assert served.status_code == 200, served.text  # 5 x ~100 + 5 fits
    assert len(anthropic_upstream.requests) == 5


@pytest.mark.parametrize("stream", [False, True])
def test_the_deprecated_functions_are_tools_of_one_call(vclient, anthropic_upstream, stream):
    functions = [tool["function"] for tool in TOOLS]
    answer = vclient.post("/v5/chat/completions", json={"model": "anthropic/two-tools", "messages": USER,
                                                        "functions": functions, "stream": stream})
    assert answer.status_code == 200, answer.text
    if stream:
        pieces = [c for chunk in chunks_of(answer.text) for c in chunk["choices"]]
        calls = [p["delta"]["function_call"] for p in pieces if p["delta"].get("function_call")]
        call = {"name": calls[0]["name"], "arguments": "".join(c.get("arguments", "") for c in calls)}
        finish = [p["finish_reason"] for p in pieces if p["finish_reason"]]
    else:
        (choice,) = answer.json()["choices"]
        call, finish = choice["message"]["function_call"], [choice["finish_reason"]]
        assert "tool_calls" not in choice["message"]
    assert call["name"] == "lookup" and json.loads(call["arguments"]) == {"said": "hello there"}
    assert finish == ["function_call"]
    sent = anthropic_upstream.requests[0]["body"]
    assert sent["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}  # one call at a time
    assert [t["name"] for t in sent["tools"]] == ["lookup", "fetch"]
