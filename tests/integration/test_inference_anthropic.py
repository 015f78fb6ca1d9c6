"""POST /v5/inference on the anthropic protocol: scale-gp-beta's `inference.create` against the
gateway in front of the fake Messages API (tests/support/fakes/anthropic_upstream.py checks every
request's shape, cache_control and thinking blocks included; `vclient` fails a test whose request
broke it), plain and streamed, billed from Anthropic's own usage, under keys, limits and budgets."""

from __future__ import annotations

import json

import httpx
import pytest
from scale_gp_beta import SGPClient

from tests.support.chat import row as ledger_row
from tests.support.environments import ANTHROPIC_SECRET, SHARED_TLS
from tests.support.fakes.anthropic_upstream import THOUGHT
from tests.support.processes import wait_until
from tests.support.provision import new_key, run_cli

USER = [{"role": "user", "content": "hello there"}]
TOOL = {"name": "lookup", "description": "looks up", "input_schema": {
    "type": "object", "properties": {"said": {"type": "string"}}, "required": ["said"]}}
CACHED_SYSTEM = [{"type": "text", "text": "a long shared preamble", "cache_control": {"type": "ephemeral"}}]


@pytest.fixture
def sgp(vclient, vendors_gateway, database):
    return SGPClient(api_key=database.key, account_id="acct-a", base_url=vendors_gateway.url, max_retries=0)


def events(response: httpx.Response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]


def test_sdk_sends_the_messages_body_as_written_with_cache_control_and_bills_anthropics_counts(
        sgp, database, anthropic_upstream):
    args = {"max_tokens": 3, "system": CACHED_SYSTEM, "messages": USER, "temperature": 0.5}
    raw = sgp.inference.with_raw_response.create(model="anthropic/claude-x", args=args)
    answer = raw.parse()
    assert answer.object == "generic_inference"
    message = answer.response
    assert message["type"] == "message" and message["content"] == [{"type": "text", "text": " w0 w1 w2"}]
    assert message["usage"]["cache_creation_input_tokens"] == 4
    sent = anthropic_upstream.requests[0]
    assert sent["body"] == {**args, "model": "claude-x"}  # the model the gateway's, nothing else changed
    assert sent["headers"]["x-api-key"] == ANTHROPIC_SECRET
    assert database.key not in json.dumps(sent["headers"])
    assert "x-gateway-usage-estimated" not in raw.headers
    row = ledger_row(database.url, raw.headers["x-request-id"])
    usage = message["usage"]
    assert (row["endpoint"], row["vendor"], row["estimated"]) == ("inference", "anthropic", False)
    assert row["prompt_tokens"] == usage["input_tokens"] + usage["cache_creation_input_tokens"]
    assert row["completion_tokens"] == usage["output_tokens"] == 3


def test_thinking_blocks_go_and_come_back_natively(vclient, anthropic_upstream):
    args = {"max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [*USER, {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "earlier", "signature": "sig-0"},
                {"type": "text", "text": "before"}]}, {"role": "user", "content": "and now?"}]}
    answer = vclient.post("/v5/inference", json={"model": "anthropic/claude-x", "args": args})
    assert answer.status_code == 200, answer.text
    content = answer.json()["response"]["content"]
    assert content[0] == {"type": "thinking", "thinking": THOUGHT, "signature": "sig-fake"}
    assert anthropic_upstream.requests[0]["body"]["thinking"] == args["thinking"]


def test_tool_use_in_the_native_shape_plain_and_streamed(sgp, vclient, database, anthropic_upstream):
    args = {"max_tokens": 50, "tools": [TOOL], "messages": USER}
    answer = sgp.inference.create(model="anthropic/claude-x", args=args)
    use = answer.response["content"][-1]
    assert (use["type"], use["name"], use["input"]) == ("tool_use", "lookup", {"said": "hello there"})
    assert answer.response["stop_reason"] == "tool_use"

    streamed = vclient.post("/v5/inference", json={"model": "anthropic/claude-x", "args": {**args, "stream": True}})
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    data = events(streamed)
    assert data[-1] == "[DONE]" and "event: done" in streamed.text
    chunks = [json.loads(d) for d in data[:-1]]
    assert all(c["object"] == "generic_inference.chunk" for c in chunks)
    kinds = [c["response"]["type"] for c in chunks]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "ping" in kinds
    partial = "".join(c["response"]["delta"]["partial_json"] for c in chunks
                      if c["response"].get("delta", {}).get("type") == "input_json_delta")
    assert json.loads(partial) == {"said": "hello there"}
    assert anthropic_upstream.requests[-1]["body"]["stream"] is True
    row = ledger_row(database.url, streamed.headers["x-request-id"])
    last_delta = next(c["response"] for c in reversed(chunks) if c["response"]["type"] == "message_delta")
    assert (row["endpoint"], row["streamed"], row["estimated"]) == ("inference", True, False)
    assert row["completion_tokens"] == last_delta["usage"]["output_tokens"]
    assert row["prompt_tokens"] == chunks[0]["response"]["message"]["usage"]["input_tokens"]


def test_a_vendor_4xx_comes_back_as_a_4xx_quoting_it_and_is_not_billed(vclient, database, anthropic_upstream):
    answer = vclient.post("/v5/inference", json={"model": "anthropic/claude-x",
                                                 "args": {"max_tokens": 5, "messages": [], "stop_sequences": ["a"]}})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "vendor_rejected" and "at least one message is required" in error["message"]
    assert ANTHROPIC_SECRET not in answer.text
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert not row["prompt_tokens"] and not row["completion_tokens"]
    anthropic_upstream.violations.clear()  # the fake's refusal was the point


@pytest.mark.parametrize(("model", "status"), [("fail-500", 502), ("fail-529", 502)])
def test_a_vendor_5xx_is_a_502_never_billed(vclient, database, model, status):
    answer = vclient.post("/v5/inference", json={"model": f"anthropic/{model}", "args": {"max_tokens": 5,
                                                                                         "messages": USER}})
    assert answer.status_code == status
    assert ANTHROPIC_SECRET not in answer.text
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert not row["prompt_tokens"] and not row["completion_tokens"]


@pytest.mark.parametrize("model", ["stream-error", "cut-stream"])
def test_a_stream_that_fails_or_is_cut_ends_with_an_error_event(vclient, model):
    """Before anything went to the client the failure is its 502; after, the stream's last event."""
    answer = vclient.post("/v5/inference", json={"model": f"anthropic/{model}",
                                                 "args": {"max_tokens": 5, "messages": USER, "stream": True}})
    if answer.status_code == 502:
        assert answer.json()["error"]["type"] == "vendor_error"
        return
    assert answer.status_code == 200
    data = events(answer)
    assert data[-1] == "[DONE]" and "error" in json.loads(data[-2])
    assert all(json.loads(d)["object"] == "generic_inference.chunk" for d in data[:-2])


@pytest.mark.parametrize(("args", "param", "code"), [
    ({"max_tokens": 5, "messages": USER, "base_url": "http://elsewhere"}, "args.base_url", "routing_in_args"),
    ({"max_tokens": 5, "messages": USER, "extra_headers": {"x": "1"}}, "args.extra_headers", "routing_in_args"),
    ({"max_tokens": 5, "messages": USER, "metadata": {"api_key": "k"}}, "args.metadata.api_key", "routing_in_args"),
    ({"max_tokens": 5, "messages": USER, "model": "claude-other"}, "args.model", "model_mismatch"),
    ({"max_tokens": 5, "messages": USER, "container": "container_1"}, "args.container", "shared_vendor_state"),
    ({"max_tokens": 5, "messages": USER, "mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]},
     "args.mcp_servers", "shared_vendor_state"),
    ({"max_tokens": 5, "messages": USER, "stream": "yes"}, "args.stream", "invalid_stream_flag"),
])  # fmt: skip
def test_args_that_route_or_reach_shared_state_are_refused_by_name(vclient, anthropic_upstream, args, param, code):
    answer = vclient.post("/v5/inference", json={"model": "anthropic/claude-x", "args": args})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == (param, code)
    assert anthropic_upstream.requests == []


def test_the_routed_model_may_be_named_in_args(vclient, anthropic_upstream):
    answer = vclient.post("/v5/inference", json={"model": "anthropic/claude-x",
                                                 "args": {"model": "claude-x", "max_tokens": 1, "messages": USER}})
    assert answer.status_code == 200 and anthropic_upstream.requests[0]["body"]["model"] == "claude-x"


def test_client_headers_never_reach_the_vendor(vclient, anthropic_upstream):
    answer = vclient.post("/v5/inference", json={"model": "anthropic/claude-x", "args": {"max_tokens": 1,
                                                                                         "messages": USER}},
                          headers={"anthropic-beta": "mcp-client-2025-04-04", "x-custom": "mine"})
    assert answer.status_code == 200
    sent = anthropic_upstream.requests[0]["headers"]
    assert "anthropic-beta" not in sent and "x-custom" not in sent


@pytest.mark.parametrize(("configuration", "param"), [
    ({"num_retries": 10}, "inference_configuration.num_retries"),
    ({"timeout_seconds": 3600}, "inference_configuration.timeout_seconds")])
def test_inference_configuration_beyond_the_vendors_is_a_400(vclient, configuration, param):
    body = {"model": "anthropic/claude-x", "inference_configuration": configuration,
            "args": {"max_tokens": 1, "messages": USER}}
    answer = vclient.post("/v5/inference", json=body)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param


def test_a_budgeted_key_needs_the_output_bound_and_is_admitted_on_it(vendors_gateway, database, anthropic_upstream):
    key, key_id, _ = new_key(database.url)
    run_cli(database.url, "limits", "set", "--key", key_id, "--budget-tokens", "100", "--period", "day",
            "--models", "anthropic/*")
    try:
        with httpx.Client(base_url=vendors_gateway.url, headers={"x-api-key": key}, timeout=30,
                          verify=SHARED_TLS) as c:
            wait_until(lambda: c.post("/v5/inference", json={"model": "gemini/x", "args": {}}).status_code == 403,
                       message="the gateway to read the new limits")
            unbounded = c.post("/v5/inference", json={"model": "anthropic/claude-x", "args": {"messages": USER}})
            assert unbounded.status_code == 400
            assert (unbounded.json()["error"]["code"], unbounded.json()["error"]["param"]) == (
                "output_bound_required", "args.max_tokens")
            too_much = c.post("/v5/inference", json={"model": "anthropic/claude-x",
                                                     "args": {"max_tokens": 500, "messages": USER}})
            assert too_much.status_code == 429 and too_much.json()["error"]["code"] == "budget_exceeded"
            fits = c.post("/v5/inference", json={"model": "anthropic/claude-x",
                                                 "args": {"max_tokens": 3, "messages": USER}})
            assert fits.status_code == 200
        assert len(anthropic_upstream.requests) == 1
    finally:  # the session's database is shared: a key left with limits stops later multi-worker gateways
        run_cli(database.url, "keys", "revoke", key_id)


def test_sdk_reads_a_streamed_tool_use_with_its_streaming_response(sgp):
    """scale-gp-beta 0.7.0's `inference.create` has no stream mode: its raw streaming response reads
    the events (docs/inference.md)."""
    args = {"max_tokens": 50, "tools": [TOOL], "messages": USER, "stream": True}
    with sgp.inference.with_streaming_response.create(model="anthropic/claude-x", args=args) as r:
        assert r.http_response.status_code == 200
        data = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    starts = [json.loads(d)["response"] for d in data[:-1]]
    blocks = [e["content_block"] for e in starts if e["type"] == "content_block_start"]
    assert blocks[-1]["type"] == "tool_use" and blocks[-1]["name"] == "lookup"
