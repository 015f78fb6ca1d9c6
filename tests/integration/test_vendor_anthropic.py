"""The gateway in front of a fake Anthropic Messages API: what it sends, what it answers."""

from __future__ import annotations

import json

import pytest

from gateway.vendors.anthropic.completions import PREFILL_INSTRUCTION
from gateway.vendors.transport.http import BACKOFF_CAP
from tests.contract.fuzz import short_fuzz
from tests.support.bodies import chunks_of, sse_events, streamed
from tests.support.environments import ANTHROPIC_SECRET
from tests.support.processes import wait_until
from tests.support.provision import ledger_rows


def test_prompt_is_prefilled_and_parameters_map_to_the_messages_api(vclient, anthropic_upstream, database):
    body = {"model": "anthropic/claude-x", "prompt": "Once upon a time", "max_tokens": 3, "temperature": 0.3,
            "top_p": 0.9, "stop": ["zz", "yy"], "user": "end-user-7"}
    r = vclient.post("/v5/completions", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["model"] == "anthropic/claude-x"
    assert data["choices"] == [{"index": 0, "text": " w0 w1 w2", "finish_reason": "length", "logprobs": None}]
    # input_tokens counts the instruction turn and the prefill; no cache use.
    words = len(PREFILL_INSTRUCTION.split()) + 4
    assert data["usage"] == {"prompt_tokens": words, "completion_tokens": 3, "total_tokens": words + 3,
                             "prompt_tokens_details": {"cached_tokens": 0}}
    (sent,) = anthropic_upstream.requests
    assert sent["path"] == "/v1/messages"
    assert sent["body"] == {
        "model": "claude-x", "max_tokens": 3, "temperature": 0.3, "top_p": 0.9, "stop_sequences": ["zz", "yy"],
        "metadata": {"user_id": "end-user-7"},
        "messages": [{"role": "user", "content": PREFILL_INSTRUCTION},
                     {"role": "assistant", "content": "Once upon a time"}],
    }  # fmt: skip
    assert sent["headers"]["x-api-key"] == ANTHROPIC_SECRET
    assert sent["headers"]["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent["headers"] and database.key not in json.dumps(sent["headers"])


def test_default_max_tokens_is_the_contracts_16(vclient, anthropic_upstream):
    r = vclient.post("/v5/completions", json={"model": "anthropic/claude-x", "prompt": "x"})
    assert r.json()["usage"]["completion_tokens"] == 16
    assert anthropic_upstream.requests[0]["body"]["max_tokens"] == 16


@pytest.mark.parametrize("stream", [False, True])
def test_trailing_whitespace_moves_out_of_the_prefill(vclient, anthropic_upstream, stream):
    # Anthropic rejects a prefill ending in whitespace; the reply's leading space stands in for it.
    r = vclient.post("/v5/completions", json={"model": "anthropic/claude-x", "prompt": "Q: 2+2\nA: ", "max_tokens": 2,
                                              "stream": stream})
    assert r.status_code == 200, r.text
    text = streamed(r.text)[0][0] if stream else r.json()["choices"][0]["text"]
    assert text == "w0 w1"
    assert anthropic_upstream.requests[0]["body"]["messages"][-1] == {"role": "assistant", "content": "Q: 2+2\nA:"}


def test_blank_prompt_sends_only_the_instruction(vclient, anthropic_upstream):
    r = vclient.post("/v5/completions", json={"model": "anthropic/claude-x", "prompt": "  ", "max_tokens": 1})
    assert r.status_code == 200, r.text
    assert anthropic_upstream.requests[0]["body"]["messages"] == [{"role": "user", "content": PREFILL_INSTRUCTION}]


@pytest.mark.parametrize(("model", "vendor"), [("claude-x", "claude_user"), ("claude-opus-4-6", "anthropic"),
                                               ("claude-sonnet-4-6-20260101", "anthropic")])
def test_prompt_as_user_turn_by_config_and_for_models_without_prefill(vclient, anthropic_upstream, model, vendor):
    r = vclient.post("/v5/completions", json={"model": f"{vendor}/{model}", "prompt": "Hello ", "max_tokens": 1})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == " w0"
    assert anthropic_upstream.requests[0]["body"]["messages"] == [{"role": "user", "content": "Hello "}]


@pytest.mark.parametrize(
    ("body", "finish"),
    [
        ({"model": "anthropic/claude-x", "max_tokens": 2}, "length"),  # max_tokens
        ({"model": "anthropic/claude-x", "max_tokens": 9, "stop": "w2"}, "stop"),  # stop_sequence
        ({"model": "anthropic/refuse"}, "content_filter"),  # refusal
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_stop_reasons(vclient, body, finish, stream):
    r = vclient.post("/v5/completions", json=body | {"prompt": "p", "stream": stream})
    assert r.status_code == 200, r.text
    if stream:
        assert streamed(r.text)[1] == {0: [finish]}
    else:
        assert r.json()["choices"][0]["finish_reason"] == finish


def test_stop_sequence_is_cut_by_the_vendor(vclient):
    r = vclient.post("/v5/completions", json={"model": "anthropic/claude-x", "prompt": "p", "stop": "w2",
                                              "max_tokens": 9})
    assert r.json()["choices"][0] == {"index": 0, "text": " w0 w1 ", "finish_reason": "stop", "logprobs": None}


@pytest.mark.parametrize("stream", [False, True])
def test_cache_reads_are_cached_tokens_and_count_as_prompt(vclient, stream):
    body = {"model": "anthropic/cached", "prompt": "a b", "max_tokens": 2, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    r = vclient.post("/v5/completions", json=body)
    usage = chunks_of(r.text)[-1]["usage"] if stream else r.json()["usage"]
    input_tokens = len(PREFILL_INSTRUCTION.split()) + 2
    assert usage == {"prompt_tokens": input_tokens + 7 + 3, "completion_tokens": 2,
                     "total_tokens": input_tokens + 12,
                     "prompt_tokens_details": {"cached_tokens": 7, "cache_creation_tokens": 3}}


def test_stream_maps_events_to_chunks(vclient, anthropic_upstream):
    r = vclient.post("/v5/completions", json={"model": "anthropic/claude-x", "prompt": "p", "max_tokens": 3,
                                              "stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    texts, finishes, chunks = streamed(r.text)
    assert texts == {0: " w0 w1 w2"} and finishes == {0: ["length"]}
    assert [c["choices"][0]["text"] for c in chunks if c["choices"]][:3] == [" w0", " w1", " w2"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3
    assert sse_events(r.text)[-1] == {"event": "done", "data": "[DONE]"}
    assert anthropic_upstream.requests[0]["body"]["stream"] is True


@pytest.mark.parametrize(("model", "message"), [("stream-error", "overloaded_error: Overloaded"),
                                                ("cut-stream", "before message_stop")])
def test_stream_failure_after_start_is_an_error_event(vclient, model, message):
    r = vclient.post("/v5/completions", json={"model": f"anthropic/{model}", "prompt": "p", "stream": True})
    assert r.status_code == 200
    events = sse_events(r.text)
    assert events[-1]["data"] == "[DONE]"
    error = json.loads(events[-2]["data"])["error"]
    assert error["type"] == "vendor_error" and error["vendor"] == "anthropic" and message in error["message"]
    assert json.loads(events[0]["data"])["choices"][0]["text"] == " w0"


LONG_RETRY_AFTER = 30  # beyond the gateway's cap: the client gets it at once, nothing is waited out


@pytest.mark.parametrize(
    ("model", "status", "code", "retry"),
    [
        ("fail-400", 400, "vendor_rejected", "false"),
        ("fail-401", 502, "vendor_auth", "false"),  # only the operator can fix the gateway's key
        (f"fail-429-{LONG_RETRY_AFTER}", 429, "vendor_rate_limited", "true"),
        ("fail-500", 502, "vendor_error", "true"),
        ("fail-529", 502, "vendor_error", "true"),  # overloaded_error
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_vendor_errors_are_translated_without_credentials(vclient, anthropic_upstream, model, status, code, retry,
                                                          stream):
    r = vclient.post("/v5/completions", json={"model": f"anthropic/{model}", "prompt": "x", "stream": stream})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code and error["vendor"] == "anthropic"
    assert r.headers["x-should-retry"] == retry
    assert ANTHROPIC_SECRET not in r.text
    if code in ("vendor_rejected", "vendor_error"):
        assert "fake failure" in error["message"]  # the vendor's own words, redacted
    if status == 429:
        assert LONG_RETRY_AFTER > BACKOFF_CAP
        assert r.headers["retry-after"] == str(LONG_RETRY_AFTER)
        assert len(anthropic_upstream.requests) == 1  # not retried: the wait is the client's to decide


def test_n_and_list_prompts_fan_out_prompt_major_with_each_prompt_counted_once(vclient, anthropic_upstream,
                                                                              database):
    r = vclient.post("/v5/completions", json={"model": "anthropic/claude-x", "prompt": ["a", "b c"], "n": 2,
                                              "max_tokens": 2})
    assert r.status_code == 200, r.text
    data = r.json()
    assert [c["index"] for c in data["choices"]] == [0, 1, 2, 3]
    assert len(anthropic_upstream.requests) == 4
    prefills = sorted(req["body"]["messages"][-1]["content"] for req in anthropic_upstream.requests)
    assert prefills == ["a", "a", "b c", "b c"]
    instruction = len(PREFILL_INSTRUCTION.split())
    # The client is told each prompt once, as OpenAI counts; the ledger records what the four calls billed.
    assert data["usage"]["prompt_tokens"] == (instruction + 1) + (instruction + 2)
    assert data["usage"]["completion_tokens"] == 8
    row = wait_until(lambda: next((row for row in ledger_rows(database.url, "acct-a")
                                   if row["request_id"] == r.headers["x-request-id"]), None), message="the row")
    assert (row["prompt_tokens"], row["completion_tokens"]) == (2 * (instruction + 1) + 2 * (instruction + 2), 8)


def test_echo_is_emulated_by_prepending_the_prompt(vclient, anthropic_upstream):
    r = vclient.post("/v5/completions", json={"model": "anthropic/claude-x", "prompt": "Hi", "echo": True,
                                              "max_tokens": 2})
    assert r.json()["choices"][0]["text"] == "Hi w0 w1"
    assert "echo" not in anthropic_upstream.requests[0]["body"]


def test_fuzz_finds_nothing(vendors_gateway, anthropic_upstream, database):
    """Schemathesis (all checks, and tests/contract/fuzz_hooks.py's: every 400 of a valid request must be a
    parameter the capability map says the vendor cannot serve), through to the fake, which checks
    every request it gets against the vendor's documented shape."""
    anthropic_upstream.clear()
    outcome = short_fuzz("anthropic", vendors_gateway.url, database.key)
    assert outcome.returncode == 0, outcome.summary()
    assert outcome.calls["positive 200"] > 0 and outcome.calls["chat positive 200"] > 0, outcome.summary()
    assert anthropic_upstream.violations == []
