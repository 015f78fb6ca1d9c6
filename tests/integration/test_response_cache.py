"""The response cache through real gateway processes (docs/cache.md), in front of the fake OpenAI
vendor that records every call: a repeat is a hit with the same choices and no vendor call, two
accounts never share an entry, streams and plain answers serve each other, refresh and
only-if-cached do what they say, nothing failed or cut is kept, the ledger and the limits see a
hit for what it is, and a Redis cache is shared by two gateways."""

from __future__ import annotations

import json
import secrets

import httpx
import openai
import pytest

from tests.support.bodies import chunks_of, sse_events
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import wait_until
from tests.support.provision import ledger_row, new_key, run_cli, sqlite_database
from tests.support.redis_servers import RedisServer, redis_prefix, redis_url, remove_redis_keys


@pytest.fixture(scope="module")
def database():
    """A database of this module's own: its keys' counted limits would stop the gateways of two
    workers without Redis that other modules start on the session's."""
    with sqlite_database() as db:
        yield db


@pytest.fixture(scope="module")
def keys(database):
    """Keys made before the gateway starts (it reads their limits then): one the cache may not
    serve, one under a tight TPM and RPM."""
    off, off_id, _ = new_key(database.url, "acct-a")
    run_cli(database.url, "limits", "set", "--key", off_id, "--cache", "off")
    limited, limited_id, limited_account = new_key(database.url)
    run_cli(database.url, "limits", "set", "--key", limited_id, "--tpm", "40", "--rpm", "3")
    reported, _, reported_account = new_key(database.url)
    budgeted, budgeted_id, budgeted_account = new_key(database.url)
    run_cli(database.url, "limits", "set", "--key", budgeted_id, "--budget-tokens", "30", "--period", "day")
    return {"off": off, "limited": limited, "limited_account": limited_account, "reported": reported,
            "reported_account": reported_account, "budgeted": budgeted, "budgeted_account": budgeted_account}


@pytest.fixture(scope="module")
def cached(upstream, database, keys):
    prices = json.dumps({"fake/m": {"input": 1, "output": 2}})  # USD per million tokens: what a hit saves
    with GatewayProcess(gateway_env(upstream.url, database.url, GATEWAY_CACHE="memory", GATEWAY_PRICES=prices)) \
            as process:
        yield process


@pytest.fixture
def http(cached, database):
    with httpx.Client(base_url=cached.url, headers={"x-api-key": database.multi_key, "x-selected-account-id": "acct-a"},
                      timeout=30, verify=SHARED_TLS) as client:
        yield client


@pytest.fixture
def sdk(cached, database):
    return openai.OpenAI(api_key=database.key, base_url=f"{cached.url}/v5", max_retries=0)


def prompt() -> str:
    return f"cache test {secrets.token_hex(4)}"


def calls(upstream) -> int:
    return len(upstream.requests)


def completion(http, body, **headers) -> httpx.Response:
    return http.post("/v5/completions", json={"model": "fake/m", "max_tokens": 4, "temperature": 0, **body},
                     headers=headers)


def test_a_repeat_is_a_hit_with_the_same_choices_and_no_vendor_call(sdk, upstream, database):
    body = {"model": "fake/m", "prompt": [prompt(), prompt()], "max_tokens": 3, "temperature": 0, "n": 2,
            "logprobs": 2, "echo": True}
    first = sdk.completions.with_raw_response.create(**body)
    assert first.headers["x-gateway-cache"] == "miss"
    made = calls(upstream)
    again = sdk.completions.with_raw_response.create(**body)
    assert again.headers["x-gateway-cache"] == "hit" and calls(upstream) == made
    a, b = json.loads(first.content), json.loads(again.content)
    assert json.dumps(a["choices"]) == json.dumps(b["choices"])  # byte for byte, logprobs and echo included
    assert a["usage"] == b["usage"] and a["id"] != b["id"] and b["created"] >= a["created"]
    assert again.parse().choices[3].text == first.parse().choices[3].text
    row = ledger_row(database.url, "acct-a", again.headers["x-request-id"])
    assert row["outcome"] == "cache_hit" and row["cost_nanos"] == 0
    missed = ledger_row(database.url, "acct-a", first.headers["x-request-id"])
    assert row["saved_nanos"] == missed["cost_nanos"] > 0 and missed["saved_nanos"] is None
    assert (row["prompt_tokens"], row["completion_tokens"]) == (a["usage"]["prompt_tokens"],
                                                                a["usage"]["completion_tokens"])


def test_two_accounts_sending_the_same_request_never_share_an_entry(http, upstream):
    body = {"prompt": prompt()}
    assert completion(http, body).headers["x-gateway-cache"] == "miss"
    made = calls(upstream)
    other = completion(http, body, **{"x-selected-account-id": "acct-b"})
    assert other.status_code == 200 and other.headers["x-gateway-cache"] == "miss" and calls(upstream) == made + 1
    assert completion(http, body, **{"x-selected-account-id": "acct-b"}).headers["x-gateway-cache"] == "hit"


def test_a_stream_is_served_from_a_plain_entry_as_the_contract_streams(http, upstream):
    body = {"prompt": prompt(), "n": 2}
    plain = completion(http, body).json()
    made = calls(upstream)
    r = completion(http, body | {"stream": True, "stream_options": {"include_usage": True}})
    assert r.headers["x-gateway-cache"] == "hit" and calls(upstream) == made
    chunks = chunks_of(r.text)
    assert {c["id"] for c in chunks} != {plain["id"]} and len({c["id"] for c in chunks}) == 1
    texts = {i: "".join(c["text"] for chunk in chunks for c in chunk["choices"] if c["index"] == i) for i in (0, 1)}
    assert texts == {c["index"]: c["text"] for c in plain["choices"]}
    finishes = [c["finish_reason"] for chunk in chunks for c in chunk["choices"] if c["finish_reason"]]
    assert sorted(finishes) == sorted(c["finish_reason"] for c in plain["choices"])  # one per choice
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == plain["usage"]
    assert sse_events(r.text)[-1] == {"event": "done", "data": "[DONE]"}  # as every stream ends (scale-gp-beta)


def test_a_plain_request_is_served_from_a_streamed_entry(sdk, upstream):
    body = {"model": "fake/m", "prompt": prompt(), "max_tokens": 5, "temperature": 0}
    streamed = "".join(chunk.choices[0].text for chunk in sdk.completions.create(**body, stream=True)
                       if chunk.choices)
    made = calls(upstream)
    hit = sdk.completions.with_raw_response.create(**body)
    assert hit.headers["x-gateway-cache"] == "hit" and calls(upstream) == made
    assert hit.parse().choices[0].text == streamed and hit.parse().usage.completion_tokens == 5


def test_chat_repeats_are_hits_streamed_or_not(cached, database, upstream):
    client = openai.OpenAI(api_key=database.key, base_url=f"{cached.url}/v5", max_retries=0)
    body = {"model": "fake/m", "messages": [{"role": "user", "content": prompt()}], "temperature": 0, "max_tokens": 4}
    first = client.chat.completions.with_raw_response.create(**body)
    made = calls(upstream)
    again = client.chat.completions.with_raw_response.create(**body)
    assert (first.headers["x-gateway-cache"], again.headers["x-gateway-cache"]) == ("miss", "hit")
    assert calls(upstream) == made
    assert json.loads(again.content)["choices"] == json.loads(first.content)["choices"]
    pieces = list(client.chat.completions.create(**body, stream=True))
    assert calls(upstream) == made
    assert pieces[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in pieces if p.choices) == \
        first.parse().choices[0].message.content
    assert [p.choices[0].finish_reason for p in pieces if p.choices and p.choices[0].finish_reason] == \
        [first.parse().choices[0].finish_reason]


def test_a_streamed_chat_answer_serves_a_plain_request(cached, database, upstream):
    client = openai.OpenAI(api_key=database.key, base_url=f"{cached.url}/v5", max_retries=0)
    body = {"model": "fake/m", "messages": [{"role": "user", "content": prompt()}], "seed": 7, "max_tokens": 3}
    streamed = "".join(p.choices[0].delta.content or "" for p in client.chat.completions.create(**body, stream=True)
                       if p.choices)
    made = calls(upstream)
    hit = client.chat.completions.with_raw_response.create(**body)
    assert hit.headers["x-gateway-cache"] == "hit" and calls(upstream) == made
    assert hit.parse().choices[0].message.content == streamed and hit.parse().choices[0].message.role == "assistant"


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"said": {"type": "string"}}}}}]


def _streamed_calls(pieces) -> list[dict]:
    """A stream's tool calls put together as the SDK's users do (by index)."""
    calls: dict[int, dict] = {}
    for piece in pieces:
        for delta in (piece.choices[0].delta.tool_calls or []) if piece.choices else []:
            call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = delta.id or call["id"]
            call["name"] += (delta.function.name or "") if delta.function else ""
            call["arguments"] += (delta.function.arguments or "") if delta.function else ""
    return [calls[i] for i in sorted(calls)]


@pytest.mark.parametrize("first_streamed", [False, True])
def test_a_tool_call_answer_is_a_hit_streamed_or_not(cached, database, upstream, first_streamed):
    client = openai.OpenAI(api_key=database.key, base_url=f"{cached.url}/v5", max_retries=0)
    body = {"model": "fake/m", "messages": [{"role": "user", "content": prompt()}], "temperature": 0,
            "tools": TOOLS}
    if first_streamed:
        fresh = _streamed_calls(client.chat.completions.create(**body, stream=True))
    else:
        answer = client.chat.completions.create(**body).choices[0]
        assert answer.finish_reason == "tool_calls"
        fresh = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                 for c in answer.message.tool_calls]
    made = calls(upstream)
    assert fresh and fresh[0]["name"] == "get_weather" and json.loads(fresh[0]["arguments"])["said"]
    hit = client.chat.completions.with_raw_response.create(**body)
    assert hit.headers["x-gateway-cache"] == "hit" and calls(upstream) == made
    choice = hit.parse().choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
            for c in choice.message.tool_calls] == fresh
    pieces = list(client.chat.completions.create(**body, stream=True))
    assert calls(upstream) == made and _streamed_calls(pieces) == fresh
    assert [p.choices[0].finish_reason for p in pieces if p.choices and p.choices[0].finish_reason] == ["tool_calls"]


def test_refresh_calls_the_vendor_and_replaces_the_entry(http, upstream):
    body = {"prompt": prompt()}
    completion(http, body)
    made = calls(upstream)
    r = completion(http, body, **{"x-gateway-cache": "refresh"})
    assert r.headers["x-gateway-cache"] == "miss" and calls(upstream) == made + 1
    assert completion(http, body).headers["x-gateway-cache"] == "hit"


def test_only_if_cached_is_a_504_without_a_vendor_call_until_it_is_cached(http, upstream):
    body = {"prompt": prompt()}
    made = calls(upstream)
    r = completion(http, body, **{"x-gateway-cache": "only-if-cached"})
    assert r.status_code == 504 and r.json()["error"]["code"] == "cache_miss" and calls(upstream) == made
    assert r.headers["x-gateway-cache"] == "miss" and "x-request-id" in r.headers
    completion(http, body)
    assert completion(http, body, **{"x-gateway-cache": "only-if-cached"}).headers["x-gateway-cache"] == "hit"


@pytest.mark.parametrize("model,stream", [("fake/fail-500", False), ("fake/cut-stream", True),
                                          ("fake/no-usage", False), ("fake/no-usage", True)])
def test_a_failed_cut_or_estimated_answer_is_not_kept(http, model, stream):
    body = {"prompt": prompt(), "model": model, "stream": stream}
    completion(http, body)
    r = completion(http, body | {"stream": False}, **{"x-gateway-cache": "only-if-cached"})
    assert r.status_code == 504


def test_sampling_is_bypassed_unless_forced_and_off_is_off(http, upstream):
    body = {"prompt": prompt(), "temperature": 0.8}
    assert completion(http, body).headers["x-gateway-cache"] == "bypass"
    assert completion(http, body).headers["x-gateway-cache"] == "bypass"
    assert completion(http, body, **{"x-gateway-cache": "force"}).headers["x-gateway-cache"] == "miss"
    assert completion(http, body, **{"x-gateway-cache": "force"}).headers["x-gateway-cache"] == "hit"
    greedy = {"prompt": prompt()}
    completion(http, greedy)
    made = calls(upstream)
    assert completion(http, greedy, **{"x-gateway-cache": "off"}).headers["x-gateway-cache"] == "bypass"
    assert calls(upstream) == made + 1
    bad = completion(http, greedy, **{"x-gateway-cache": "perhaps"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["header", "x-gateway-cache"]


def test_a_key_switched_off_is_never_served_from_the_cache(cached, keys, upstream):
    with httpx.Client(base_url=cached.url, headers={"x-api-key": keys["off"]}, timeout=30, verify=SHARED_TLS) as c:
        body = {"prompt": prompt()}
        assert completion(c, body).headers["x-gateway-cache"] == "bypass"
        assert completion(c, body).headers["x-gateway-cache"] == "bypass"


def test_hits_count_against_rpm_but_not_tpm(cached, keys, database):
    with httpx.Client(base_url=cached.url, headers={"x-api-key": keys["limited"]}, timeout=30,
                      verify=SHARED_TLS) as c:
        body = {"prompt": "a b c", "max_tokens": 20}  # 3 + 20 tokens of the 40 a minute
        first = completion(c, body)
        assert first.status_code == 200, first.text
        ledger_row(database.url, keys["limited_account"], first.headers["x-request-id"])
        other = completion(c, body | {"prompt": "d e f"})
        assert other.status_code == 429 and other.json()["error"]["code"] == "tokens_per_minute"
        hit = completion(c, body)
        assert hit.status_code == 200 and hit.headers["x-gateway-cache"] == "hit"
        third = completion(c, body)  # the third request of the minute: refusal and hit counted, not the refused
        assert third.status_code == 200, third.text
        over = completion(c, body)
        assert over.status_code == 429 and over.json()["error"]["code"] == "requests_per_minute"


def test_hits_are_not_charged_to_a_budget(cached, keys, database):
    with httpx.Client(base_url=cached.url, headers={"x-api-key": keys["budgeted"]}, timeout=30,
                      verify=SHARED_TLS) as c:
        body = {"prompt": "a b c", "max_tokens": 20}  # 3 + 20 tokens of the day's 30
        first = completion(c, body)
        assert first.status_code == 200, first.text
        ledger_row(database.url, keys["budgeted_account"], first.headers["x-request-id"])
        other = completion(c, body | {"prompt": "d e f"})
        assert other.status_code == 429 and other.json()["error"]["code"] == "budget_exceeded", other.text
        for _ in range(3):  # each would take the budget past its 30 tokens, were it charged
            hit = completion(c, body)
            assert hit.status_code == 200 and hit.headers["x-gateway-cache"] == "hit"


def test_the_usage_report_shows_hits_and_what_they_saved(cached, keys, database):
    with httpx.Client(base_url=cached.url, headers={"x-api-key": keys["reported"]}, timeout=30,
                      verify=SHARED_TLS) as c:
        body = {"prompt": "a b c d", "max_tokens": 6}
        first, hit = completion(c, body), completion(c, body)
        for r in (first, hit):
            ledger_row(database.url, keys["reported_account"], r.headers["x-request-id"])
        lines = {line["outcome"]: line for line in c.get("/v5/usage", params={"group_by": "outcome"}).json()["data"]}
        total = c.get("/v5/usage").json()["data"]
    completed, cached_line = lines["completed"], lines["cache_hit"]
    assert (cached_line["requests"], cached_line["cache_hits"], cached_line["cost_usd"]) == (1, 1, 0)
    assert cached_line["total_tokens"] == completed["total_tokens"]
    assert cached_line["cache_saved_usd"] == completed["cost_usd"] > 0 and completed["cache_saved_usd"] == 0
    assert [(line["requests"], line["cache_hits"], line["cache_saved_usd"]) for line in total] == \
        [(2, 1, completed["cost_usd"])]


def test_metrics_count_hits_misses_and_stored_bytes(http, cached):
    body = {"prompt": prompt()}
    completion(http, body)
    completion(http, body)

    def counted() -> str | None:
        text = httpx.get(f"{cached.url}/metrics", verify=SHARED_TLS).text
        found = 'gateway_cache_lookups_total{result="hit"}' in text and "gateway_cache_stored_bytes_total" in text
        return text if found and 'gateway_cache_lookups_total{result="miss"}' in text else None

    text = wait_until(counted, message="the cache's metrics")
    assert "gateway_cache_memory_bytes" in text


def test_a_redis_cache_is_shared_by_two_gateways(upstream, database):
    prefix = redis_prefix()
    env = gateway_env(upstream.url, database.url, GATEWAY_CACHE="redis", GATEWAY_REDIS_URL=redis_url(),
                      GATEWAY_REDIS_PREFIX=prefix)
    try:
        with GatewayProcess(env) as one, GatewayProcess(env) as two:
            body = {"model": "fake/m", "prompt": prompt(), "max_tokens": 4, "temperature": 0}
            headers = {"x-api-key": database.key}
            first = httpx.post(f"{one.url}/v5/completions", json=body, headers=headers, verify=SHARED_TLS)
            made = calls(upstream)
            second = httpx.post(f"{two.url}/v5/completions", json=body, headers=headers, verify=SHARED_TLS)
            assert (first.headers["x-gateway-cache"], second.headers["x-gateway-cache"]) == ("miss", "hit")
            assert second.json()["choices"] == first.json()["choices"] and calls(upstream) == made
    finally:
        remove_redis_keys(prefix)


def test_a_redis_outage_is_a_miss_never_a_failure(upstream, database):
    with RedisServer() as redis_server:
        env = gateway_env(upstream.url, database.url, GATEWAY_CACHE="redis", GATEWAY_REDIS_URL=redis_server.url)
        with GatewayProcess(env) as gateway:
            body = {"model": "fake/m", "prompt": prompt(), "max_tokens": 4, "temperature": 0}
            headers = {"x-api-key": database.key}

            def send(**more) -> httpx.Response:
                return httpx.post(f"{gateway.url}/v5/completions", json=body, headers=headers | more,
                                  verify=SHARED_TLS)

            first = send()
            assert send().headers["x-gateway-cache"] == "hit"
            redis_server.stop()
            made = calls(upstream)
            away = send()
            assert away.status_code == 200 and away.headers["x-gateway-cache"] == "miss"
            assert away.json()["choices"] == first.json()["choices"] and calls(upstream) == made + 1
            assert send(**{"x-gateway-cache": "only-if-cached"}).status_code == 504


def test_a_streamed_call_of_openais_own_api_is_kept_and_a_hit_calls_the_same(cached, database, upstream):
    client = openai.OpenAI(api_key=database.key, base_url=f"{cached.url}/v5", max_retries=0)
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    body = {"model": "fake/m", "input": prompt(), "temperature": 0, "tools": tools, "tool_choice": "required"}
    events = list(client.responses.create(**body, stream=True))  # the vendor's own events (native)
    made = calls(upstream)
    hit = client.responses.with_raw_response.create(**body)
    assert hit.headers["x-gateway-cache"] == "hit" and calls(upstream) == made
    (call,) = hit.parse().output
    (streamed,) = events[-1].response.output
    assert (call.type, call.call_id, call.name, call.arguments) == (
        "function_call", streamed.call_id, "lookup", streamed.arguments)  # the vendor's call id, kept
    assert hit.parse().usage == events[-1].response.usage


def test_a_deterministic_response_is_a_hit_and_a_sampled_one_bypasses(cached, database, upstream):
    client = openai.OpenAI(api_key=database.key, base_url=f"{cached.url}/v5", max_retries=0)
    body = {"model": "fake/m", "input": prompt(), "temperature": 0, "max_output_tokens": 4}
    first = client.responses.with_raw_response.create(**body)
    made = calls(upstream)
    again = client.responses.with_raw_response.create(**body, metadata={"kept": "apart"})  # not what makes it
    assert (first.headers["x-gateway-cache"], again.headers["x-gateway-cache"]) == ("miss", "hit")
    assert calls(upstream) == made
    a, b = first.parse(), again.parse()
    assert a.id != b.id and a.output_text == b.output_text and a.usage == b.usage
    assert client.responses.retrieve(b.id).metadata == {"kept": "apart"}  # a hit is stored as any answer
    events = list(client.responses.create(**body, stream=True))
    assert calls(upstream) == made and events[-1].response.output_text == a.output_text
    sampled = client.responses.with_raw_response.create(**body | {"temperature": 0.8})
    assert sampled.headers["x-gateway-cache"] == "bypass"
