"""POST /v5/chat/completions and the model lists, with the official SDKs against a live gateway in
front of the fake OpenAI server (tests/support/fakes/openai_chat_upstream.py checks the wire shape)."""

from __future__ import annotations

import json

import openai
import pytest
from scale_gp_beta import SGPClient

from tests.support.bodies import chunks_of
from tests.support.metrics import metric, scrape
from tests.support.processes import wait_until
from tests.support.provision import ledger_row

USER = [{"role": "user", "content": "hello there"}]
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"said": {"type": "string"}}, "required": ["said"]}}}]


@pytest.fixture
def oai(gateway, database):
    return openai.OpenAI(api_key=database.key, base_url=f"{gateway.url}/v5", max_retries=0)


@pytest.fixture
def sgp(gateway, database):
    return SGPClient(api_key=database.key, account_id="acct-a", base_url=gateway.url, max_retries=0)


def _sent(upstream):
    chats = [r for r in upstream.requests if r["path"] == "/v1/chat/completions"]
    assert len(chats) == 1
    return chats[0]["body"]


def test_openai_sdk_plain_chat_passes_the_request_through(oai, upstream):
    answer = oai.chat.completions.create(model="fake/m", messages=[{"role": "system", "content": "be brief"}, *USER],
                                         max_tokens=3, temperature=0.5, seed=7, user="u-1")
    assert answer.object == "chat.completion" and answer.model == "fake/m"
    assert answer.id.startswith("chatcmpl-")
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].message.content == " w0 w1 w2"
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage.completion_tokens == 3
    sent = _sent(upstream)
    assert sent["model"] == "m" and sent["messages"][0] == {"role": "system", "content": "be brief"}
    assert sent["max_tokens"] == 3 and sent["seed"] == 7 and sent["user"] == "u-1"


def test_openai_sdk_n_and_stop(oai, upstream):
    answer = oai.chat.completions.create(model="fake/m", messages=USER, n=2, stop=[" w2"], max_tokens=5)
    assert [c.index for c in answer.choices] == [0, 1]
    assert all(c.message.content == " w0 w1" and c.finish_reason == "stop" for c in answer.choices)
    assert _sent(upstream)["n"] == 2 and _sent(upstream)["stop"] == [" w2"]


def test_openai_sdk_stream_with_usage(oai, upstream):
    chunks = list(oai.chat.completions.create(model="fake/m", messages=USER, max_tokens=3, n=2, stream=True,
                                              stream_options={"include_usage": True}))
    per_choice: dict[int, list] = {}
    for chunk in chunks[:-1]:
        assert chunk.object == "chat.completion.chunk"
        for choice in chunk.choices:
            per_choice.setdefault(choice.index, []).append(choice)
    for pieces in per_choice.values():
        assert pieces[0].delta.role == "assistant"
        assert "".join(p.delta.content or "" for p in pieces) == " w0 w1 w2"
        assert [p.finish_reason for p in pieces if p.finish_reason] == ["length"]
    assert sorted(per_choice) == [0, 1]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    assert _sent(upstream)["stream_options"] == {"include_usage": True}


def test_a_stream_without_include_usage_has_no_usage_chunk(oai):
    chunks = list(oai.chat.completions.create(model="fake/m", messages=USER, max_tokens=2, stream=True))
    assert all(chunk.choices for chunk in chunks)
    assert all(chunk.usage is None for chunk in chunks)


def test_openai_sdk_tools(oai, upstream):
    answer = oai.chat.completions.create(model="fake/m", messages=USER, tools=TOOLS, tool_choice="required")
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.id == "call_0" and call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"said": "hello there"}
    assert _sent(upstream)["tools"] == TOOLS and _sent(upstream)["tool_choice"] == "required"


def test_openai_sdk_streamed_tool_call_deltas(oai):
    chunks = list(oai.chat.completions.create(model="fake/m", messages=USER, tools=TOOLS, stream=True))
    deltas = [d for c in chunks for ch in c.choices for d in (ch.delta.tool_calls or [])]
    assert deltas[0].id == "call_0" and deltas[0].function.name == "lookup"
    assert all(d.id is None and d.function.name is None for d in deltas[1:])
    assert {d.index for d in deltas} == {0}
    assert json.loads("".join(d.function.arguments or "" for d in deltas)) == {"said": "hello there"}
    assert [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason] == ["tool_calls"]


def test_a_tool_call_whose_arguments_are_not_json_is_the_vendors_failure(client):
    answer = client.post("/v5/chat/completions", json={"model": "fake/bad-args", "messages": USER, "tools": TOOLS})
    assert answer.status_code == 502
    assert "not JSON" in answer.json()["error"]["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("choice", "named"), [
    ("required", 'tool_choice was "required"'),
    ({"type": "function", "function": {"name": "lookup"}}, "calling lookup although tool_choice named it"),
])  # fmt: skip
def test_an_answer_without_the_forced_tool_call_is_the_vendors_failure(client, database, choice, named, stream):
    answer = client.post("/v5/chat/completions", json={"model": "fake/ignores-tool-choice", "messages": USER,
                                                       "tools": TOOLS, "tool_choice": choice, "stream": stream})
    if stream:  # begun before the vendor's end: its error event ends it
        assert answer.status_code == 200, answer.text
        error = chunks_of(answer.text)[-1]["error"]
    else:
        assert answer.status_code == 502, answer.text
        error = answer.json()["error"]
    assert named in error["message"] and error["vendor"] == "fake", error
    row = ledger_row(database.url, "acct-a", answer.headers["x-request-id"])
    assert row["outcome"] == "vendor_error", row


def test_a_tool_conversation_is_passed_on(oai, upstream):
    messages = [*USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "found"}]
    oai.chat.completions.create(model="fake/m", messages=messages, tools=TOOLS, tool_choice="none", max_tokens=1)
    assert _sent(upstream)["messages"] == messages


def test_logprobs(oai):
    answer = oai.chat.completions.create(model="fake/m", messages=USER, max_tokens=2, logprobs=True, top_logprobs=2)
    content = answer.choices[0].logprobs.content
    assert [t.token for t in content] == [" w0", " w1"]
    assert all(len(t.top_logprobs) == 2 for t in content)


def test_scale_sdk_chat_and_models(sgp):
    answer = sgp.chat.completions.create(model="fake/m", messages=USER, max_tokens=2)
    assert answer.choices[0].message.content == " w0 w1"
    chunks = list(sgp.chat.completions.create(model="fake/m", messages=USER, max_tokens=2, stream=True))
    assert "".join(ch.delta.content or "" for c in chunks for ch in c.choices) == " w0 w1"
    models = sgp.chat.completions.models()
    names = {(m.api_model_vendor, m.name) for m in models.items}
    assert ("fake", "backup") in names  # a model of the fallback chains
    assert all(m.api_model_type == "chat_completion" for m in models.items)
    only = sgp.chat.completions.models(model_vendor="fake", limit=1)
    assert len(only.items) == 1 and only.items[0].api_model_vendor == "fake"


def test_openai_models_list(oai):
    ids = [m.id for m in oai.models.list()]
    assert "fake/backup" in ids and ids == sorted(ids)


@pytest.mark.parametrize("body, where", [
    ({"model": "fake/m"}, "messages"),
    ({"model": "fake/m", "messages": [{"role": "robot", "content": "x"}]}, "messages"),
    ({"model": "fake/m", "messages": [{"role": "tool", "content": "x"}]}, "messages"),
    ({"model": "fake/m", "messages": USER, "n": 0}, "n"),
    ({"model": "fake/m", "messages": USER, "tools": [{"type": "function", "function": {}}]}, "tools"),
    ({"model": "fake/m", "messages": USER, "tool_choice": "required"}, "tool_choice"),
    ({"model": "fake/m", "messages": USER, "top_logprobs": 2}, "top_logprobs"),
    ({"model": "fake/m", "messages": [{"role": "assistant"}]}, "messages"),
    ({"model": "fake/m", "messages": USER, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "nonsense"}}}}, "response_format"),
])
def test_bad_chat_requests_are_422_naming_the_field(client, body, where):
    answer = client.post("/v5/chat/completions", json=body)
    assert answer.status_code == 422, answer.text
    error = answer.json()
    assert error["error"]["type"] == "invalid_request_error"
    assert error["detail"] and where in json.dumps(error["detail"])


def test_what_the_vendor_cannot_do_is_refused_by_name(client):
    answer = client.post("/v5/chat/completions", json={"model": "fake/m", "messages": USER, "top_k": 3})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "top_k"
    answer = client.post("/v5/chat/completions", json={"model": "fake/m", "messages": USER, "x-openai-api-key": "sk"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "x-openai-api-key"


def test_the_vendors_list_says_what_each_chat_parameter_gets(client):
    fake = next(v for v in client.get("/v5/vendors").json()["data"] if v["name"] == "fake")
    assert fake["chat_parameters"]["messages"]["support"] == "native"
    assert fake["chat_parameters"]["top_k"]["support"] == "unsupported"


def test_chat_requests_are_counted_with_their_operation_and_recorded_with_their_endpoint(client, gateway, database):
    answer = client.post("/v5/chat/completions", json={"model": "fake/chat-counted", "messages": USER, "max_tokens": 1})
    assert answer.status_code == 200
    row = ledger_row(database.url, "acct-a", answer.headers["x-request-id"])
    assert row["endpoint"] == "chat" and row["prompt_tokens"] > 0
    wait_until(lambda: metric(scrape(gateway.url), "gateway_requests_total", vendor="fake", model="fake/chat-counted",
                              status="200", stream="false", operation="chat") == 1, message="the chat request counted")


def test_the_usage_report_breaks_requests_down_by_endpoint(client, database):
    """`group_by=endpoint`: chat and completions apart, each line's sums its own rows'."""
    model = "fake/by-endpoint"
    chat = client.post("/v5/chat/completions", json={"model": model, "messages": USER, "max_tokens": 1})
    text = client.post("/v5/completions", json={"model": model, "prompt": "hello there", "max_tokens": 1})
    assert chat.status_code == text.status_code == 200
    rows = [ledger_row(database.url, "acct-a", a.headers["x-request-id"]) for a in (chat, text)]
    report = client.get("/v5/usage", params={"group_by": "model,endpoint", "model": model})
    assert report.status_code == 200, report.text
    assert report.json()["group_by"] == ["model", "endpoint"]
    lines = {line["endpoint"]: line for line in report.json()["data"] if line["account_id"] == "acct-a"}
    assert sorted(lines) == ["chat", "completions"]
    for row in rows:
        line = lines[row["endpoint"]]
        assert line["model"] == model and line["requests"] == 1
        assert line["prompt_tokens"] == row["prompt_tokens"] and line["total_tokens"] == row["total_tokens"]
