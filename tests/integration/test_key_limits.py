"""Limits of keys and accounts through a real gateway (one process, counters in its memory), set
with the CLI as an operator would: requests and tokens per minute, requests in flight, token
budgets, allow-lists; the answers, their headers, and what the ledger and the usage report keep.
The gateway's limits clock is a file the tests move (tests/support/clocked_gateway.py)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.cli import gateway_cli
from tests.support.clocks import FileClock
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import wait_until
from tests.support.provision import ledger_rows, new_key, run_cli, sqlite_database, wait_for_rows

PROBE = "nope/probe"  # outside every allow-list below: a 403 tells that the gateway has a key's limits


@pytest.fixture(scope="module")
def db():
    with sqlite_database() as database:
        yield database


@pytest.fixture(scope="module")
def clock(tmp_path_factory):
    return FileClock(str(tmp_path_factory.mktemp("clock") / "now"))


# $1,000 and $2,000 per million prompt and completion tokens: a tenth of a cent a token, two for completions.
PRICES = '{"fake/priced": {"input": 1000, "output": 2000}}'


def limited_env(upstream, db, clock, **extra):
    return gateway_env(upstream.url, db.url, GATEWAY_LIMITS_CACHE_SECONDS="0.05", GATEWAY_PRICES=PRICES, **clock.env,
                       **extra)


# The fake vendor again, lacking `n`: the gateway emulates it, a vendor call per choice.
FANOUT = {"GATEWAY_VENDOR_FANOUT_PROTOCOL": "openai", "GATEWAY_VENDOR_FANOUT_SERVER": "openai",
          "GATEWAY_VENDOR_FANOUT_LACKS": "n"}


@pytest.fixture(scope="module")
def gateway(upstream, db, clock):
    env = limited_env(upstream, db, clock, **FANOUT, GATEWAY_VENDOR_FANOUT_BASE_URL=f"{upstream.url}/v1")
    with GatewayProcess(env, module="tests.support.clocked_gateway") as process:
        yield process


def limit(gateway, db, key: str, *args: str) -> None:
    """`gateway limits set ARGS --models fake/* ...`, then wait until the gateway applies it."""
    models = [] if "--models" in args else ["--models", "fake/*"]
    run_cli(db.url, "limits", "set", *args, *models)

    def applied() -> bool:
        r = httpx.post(f"{gateway.url}/v5/completions", headers={"x-api-key": key},
                       json={"model": PROBE, "prompt": "x"}, verify=SHARED_TLS)
        return r.status_code == 403

    wait_until(applied, message="the gateway to read the new limits")


def not_a_probe(row: dict) -> bool:
    """The rows of a test's own requests: `limit` probes until the gateway applies a limit, each
    probe a refused row, and how many it takes is up to the gateway's cache."""
    return row["model"] != PROBE


def complete(gateway, key: str, **body) -> httpx.Response:
    body = {"model": "fake/m", "prompt": "x", "max_tokens": 2} | body
    return httpx.post(f"{gateway.url}/v5/completions", headers={"x-api-key": key}, json=body, timeout=30,
                      verify=SHARED_TLS)


def test_requests_per_minute_refuse_with_retry_after_and_the_headers(gateway, db, clock, upstream):
    key, key_id, account = new_key(db.url)
    limit(gateway, db, key, "--key", key_id, "--rpm", "3")
    answers = [complete(gateway, key, prompt="rpm") for _ in range(4)]
    assert [r.status_code for r in answers] == [200, 200, 200, 429]
    assert [(r.headers["x-ratelimit-limit-requests"], r.headers["x-ratelimit-remaining-requests"],
             r.headers["x-ratelimit-reset-requests"]) for r in answers] == [
        ("3", "2", "20s"), ("3", "1", "40s"), ("3", "0", "1m0s"), ("3", "0", "1m0s")]
    assert "x-ratelimit-limit-tokens" not in answers[0].headers  # no token limit applies
    refused = answers[-1]
    assert refused.headers["retry-after"] == "20" and refused.headers["x-should-retry"] == "true"
    error = refused.json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == "requests_per_minute"
    assert key_id in error["message"] and "3 requests per minute" in error["message"]
    assert sum(r["body"]["prompt"] == "rpm" for r in upstream.requests) == 3  # the refused one reached no vendor
    clock.advance(20)
    assert complete(gateway, key, prompt="rpm").status_code == 200

    rows = wait_for_rows(db.url, account, 5, where=lambda r: r["model"] == "fake/m")
    assert sorted(r["outcome"] for r in rows) == ["completed"] * 4 + ["refused"]
    refused_row = next(r for r in rows if r["outcome"] == "refused")
    assert (refused_row["total_tokens"], refused_row["key_id"], refused_row["vendor"]) == (0, key_id, "fake")
    report = httpx.get(f"{gateway.url}/v5/usage", headers={"x-api-key": key}, verify=SHARED_TLS).json()
    line = next(line for line in report["data"] if line["model"] == "fake/m")
    assert (line["requests"], line["refused_requests"]) == (4, 1)


def test_a_token_limit_reserves_the_estimate_and_settles_to_the_usage(gateway, db):
    key, key_id, _ = new_key(db.url)
    limit(gateway, db, key, "--key", key_id, "--tpm", "100")
    # Reserved: 8 prompt tokens (the offline counter: "a", " b", ...), + max_tokens 20 = 28. Used
    # (the fake vendor counts words, and stops at " w5"): 8 + 5 = 13.
    body = {"prompt": "a b c d e f g h", "max_tokens": 20, "stop": [" w5"]}
    first = complete(gateway, key, **body)
    assert first.status_code == 200 and first.json()["usage"]["total_tokens"] == 13
    assert (first.headers["x-ratelimit-limit-tokens"], first.headers["x-ratelimit-remaining-tokens"]) == ("100", "72")
    second = complete(gateway, key, **body)
    assert second.headers["x-ratelimit-remaining-tokens"] == str(100 - 13 - 28)  # the first settled to 13
    too_large = complete(gateway, key, max_tokens=200)
    assert too_large.status_code == 429 and too_large.headers["x-should-retry"] == "false"
    assert too_large.json()["error"]["code"] == "request_too_large" and "retry-after" not in too_large.headers
    # 74 left now; 84 wanted (4 + 80): the 10 missing refill in 6 s at 100 per minute
    wait = complete(gateway, key, prompt="a b c d", max_tokens=80)
    assert wait.status_code == 429 and wait.json()["error"]["code"] == "tokens_per_minute"
    assert wait.headers["retry-after"] == "6" and wait.headers["x-should-retry"] == "true"
    assert wait.headers["x-ratelimit-remaining-tokens"] == "74"


def test_requests_in_flight_are_limited_and_freed_when_they_end(gateway, db, upstream):
    key, key_id, _ = new_key(db.url)
    limit(gateway, db, key, "--key", key_id, "--concurrent", "1")
    held: list[httpx.Response] = []
    stream = threading.Thread(target=lambda: held.append(complete(gateway, key, model="fake/held", stream=True)))
    stream.start()
    try:
        wait_until(lambda: upstream.holding == 1, message="the stream held at the vendor")
        busy = complete(gateway, key)
        assert busy.status_code == 429 and busy.json()["error"]["code"] == "concurrent_requests"
        assert busy.headers["retry-after"] == "1" and busy.headers["x-should-retry"] == "true"
    finally:
        upstream.release_held()
        stream.join(30)
    assert held[0].status_code == 200
    assert complete(gateway, key).status_code == 200


def test_a_spent_token_budget_is_insufficient_quota_and_survives_a_restart(upstream, db, clock, gateway):
    key, key_id, account = new_key(db.url)
    limit(gateway, db, key, "--key", key_id, "--budget-tokens", "30", "--period", "day")
    body = {"prompt": "a b c d", "max_tokens": 10}  # reserves 4 + 10, uses 4 + 10
    assert [complete(gateway, key, **body).status_code for _ in range(2)] == [200, 200]
    spent = complete(gateway, key, **body)
    assert spent.status_code == 429 and spent.headers["x-should-retry"] == "false"
    assert "retry-after" not in spent.headers
    error = spent.json()["error"]
    assert (error["type"], error["code"]) == ("insufficient_quota", "budget_exceeded")
    assert "30 tokens per day" in error["message"] and "28 used" in error["message"]
    assert complete(gateway, key, prompt="a", max_tokens=1).status_code == 200  # 28 + 2 fits: 30 used
    wait_for_rows(db.url, account, 4, where=not_a_probe)  # the refused row among them
    shown = json.loads(run_cli(db.url, "limits", "show", "--key", key_id, "--format", "json"))
    budget = next(row for row in shown if row["limit"] == "budget_tokens")
    assert (budget["value"], budget["used"], budget["remaining"], budget["source"]) == (
        "30 per day", "30", "0", "ledger")

    # Another gateway on the same database starts from the ledger: the budget is still spent.
    with GatewayProcess(limited_env(upstream, db, clock), module="tests.support.clocked_gateway") as other:
        assert complete(other, key, prompt="a", max_tokens=1).status_code == 429
        clock.advance(86_400)  # tomorrow is another day
        assert complete(other, key, **body).status_code == 200


def test_a_budget_reserves_the_prompt_of_every_vendor_call_an_emulated_n_makes(gateway, db, upstream):
    """Where `n` is emulated every vendor call carries the prompt, and is billed for it: the
    reservation counts it once per call (it counted it once, and n: 50 spent five budgets)."""
    key, key_id, _ = new_key(db.url)
    limit(gateway, db, key, "--key", key_id, "--budget-tokens", "1000", "--period", "day", "--models", "fanout/*")
    prompt = " ".join(["a"] * 100)  # 100 tokens to the ledger's offline counter
    upstream.clear()
    refused = complete(gateway, key, model="fanout/m", prompt=prompt, max_tokens=1, n=50)
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "budget_exceeded" and "may use up to 5050" in error["message"].replace(",", "")
    assert upstream.requests == []  # refused before any vendor call
    served = complete(gateway, key, model="fanout/m", prompt=prompt, max_tokens=1, n=5)  # 5 x 100 + 5 fits
    assert served.status_code == 200 and len(served.json()["choices"]) == 5
    assert len([r for r in upstream.requests if r["path"] == "/v1/completions"]) == 5


def test_concurrent_prompts_the_estimate_undercounts_cannot_multiply_its_error(gateway, db):
    """Twenty 4,000-character CJK prompts at once against a 10,000-token budget, on a vendor that
    bills a token per character: each reserves what the offline counter counts (not chars / 4,
    which admitted all twenty and billed 3.6 budgets), so the budget holds but for one request's
    estimate error."""
    key, key_id, account = new_key(db.url)
    limit(gateway, db, key, "--key", key_id, "--budget-tokens", "10000", "--period", "day")
    text = "数据库连接池的大小限制了并发请求数量，网关按照每个字符计费。"
    prompt = (text * 200)[:4000]

    def one(_: int) -> httpx.Response:
        return complete(gateway, key, model="fake/per-character", prompt=prompt, max_tokens=1)

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(one, range(20)))
    served = [a for a in answers if a.status_code == 200]
    assert 1 <= len(served) <= 2 and len(served) + [a.status_code for a in answers].count(429) == 20
    rows = wait_for_rows(db.url, account, 20, where=lambda row: not_a_probe(row))
    billed = sum(row["total_tokens"] for row in rows if row["outcome"] == "completed")
    assert billed == len(served) * 4001 <= 10_000


def test_a_budget_in_dollars_is_kept_by_the_prices_and_refuses_a_model_without_one(gateway, db):
    key, key_id, account = new_key(db.url)
    limit(gateway, db, key, "--key", key_id, "--budget-usd", "0.05", "--period", "day")
    body = {"model": "fake/priced", "prompt": "a b c d", "max_tokens": 10}  # reserves $0.022, costs $0.024
    assert [complete(gateway, key, **body).status_code for _ in range(2)] == [200, 200]
    spent = complete(gateway, key, **body)  # $0.048 used: $0.022 more does not fit
    assert spent.status_code == 429 and spent.headers["x-should-retry"] == "false"
    error = spent.json()["error"]
    assert (error["type"], error["code"]) == ("insufficient_quota", "budget_exceeded")
    assert "the budget of key" in error["message"] and "is spent: $0.05 per day (UTC); $0.048 used" in error["message"], \
        error["message"]
    # A model without a price cannot be kept to a budget in dollars: refused, not let through free.
    unpriced = complete(gateway, key, model="fake/m")
    assert unpriced.status_code == 403 and unpriced.headers["x-should-retry"] == "false"
    assert (unpriced.json()["error"]["code"], unpriced.json()["error"]["param"]) == ("model_unpriced", "model")
    rows = wait_for_rows(db.url, account, 4, where=not_a_probe)
    assert sorted(r["cost_nanos"] for r in rows if r["model"] == "fake/priced" and r["outcome"] == "completed") == [
        24_000_000, 24_000_000]
    shown = json.loads(run_cli(db.url, "limits", "show", "--key", key_id, "--format", "json"))
    budget = next(row for row in shown if row["limit"] == "budget_usd")
    assert (budget["value"], budget["used"], budget["remaining"]) == ("$0.05 per day", "$0.048", "$0.002")
    run_cli(db.url, "limits", "clear", "--key", key_id, "--budget-usd")
    wait_until(lambda: complete(gateway, key, model="fake/m").status_code == 200, message="the budget cleared")


@pytest.fixture(scope="module")
def cached_gateway(upstream, db, clock):
    """With the response cache on, a hit billed half of what its tokens cost."""
    env = limited_env(upstream, db, clock, GATEWAY_CACHE="memory", GATEWAY_CACHE_HIT_PRICE="0.5")
    with GatewayProcess(env, module="tests.support.clocked_gateway") as process:
        yield process


def test_what_a_cache_hit_is_billed_counts_against_a_budget_in_dollars(cached_gateway, db):
    """A hit billed $0.012 reserves and spends $0.012 of the budget (it was never counted: a $0.05
    budget paid for any number of them), and the ledger's consumption counts it as well."""
    key, key_id, account = new_key(db.url)
    limit(cached_gateway, db, key, "--key", key_id, "--budget-usd", "0.05", "--period", "day")
    body = {"model": "fake/priced", "prompt": "a b c d", "max_tokens": 10, "temperature": 0}  # costs $0.024
    answers = [complete(cached_gateway, key, **body) for _ in range(4)]
    assert [(r.status_code, r.headers.get("x-gateway-cache")) for r in answers[:3]] == [
        (200, "miss"), (200, "hit"), (200, "hit")]  # $0.024 + $0.012 + $0.012: $0.048
    spent = answers[3]  # a third hit's $0.012 does not fit
    assert spent.status_code == 429, spent.text
    error = spent.json()["error"]
    assert error["code"] == "budget_exceeded" and "$0.048 used" in error["message"], error["message"]
    rows = wait_for_rows(db.url, account, 4, where=not_a_probe)
    assert sorted((r["outcome"], r["cost_nanos"]) for r in rows) == [
        ("cache_hit", 12_000_000), ("cache_hit", 12_000_000), ("completed", 24_000_000), ("refused", 0)]
    shown = json.loads(run_cli(db.url, "limits", "show", "--key", key_id, "--format", "json"))
    budget = next(row for row in shown if row["limit"] == "budget_usd")
    assert (budget["used"], budget["source"]) == ("$0.048", "ledger")


def test_an_allow_list_refuses_other_models_and_their_fallbacks(gateway, db, upstream):
    key, key_id, account = new_key(db.url)
    limit(gateway, db, key, "--key", key_id, "--models", "fake/a*", "fake/fail-503")
    assert complete(gateway, key, model="fake/abc").status_code == 200
    refused = complete(gateway, key, model="fake/b")
    assert refused.status_code == 403 and refused.headers["x-should-retry"] == "false"
    error = refused.json()["error"]
    assert error["code"] == "model_not_allowed" and error["param"] == "model"
    assert "fake/b" in error["message"] and key_id in error["message"]
    # fake/fail-503 falls back to fake/backup (tests/support/), which the list does not allow
    failed = complete(gateway, key, model="fake/fail-503")
    assert failed.status_code == 502 and not any(r["body"]["model"] == "backup" for r in upstream.requests)

    run_cli(db.url, "limits", "set", "--account", account, "--models", "fake/a1")  # both lists apply
    wait_until(lambda: complete(gateway, key, model="fake/a2").status_code == 403, message="the account's list")
    error = complete(gateway, key, model="fake/a2").json()["error"]
    assert f"account {account} (key {key_id})" in error["message"]
    assert complete(gateway, key, model="fake/a1").status_code == 200


def test_an_account_limit_counts_all_its_keys_and_streams_carry_the_headers(gateway, db):
    key, key_id, account = new_key(db.url)
    other, _, _ = new_key(db.url, account)
    limit(gateway, db, key, "--account", account, "--rpm", "2")
    streamed = complete(gateway, key, stream=True)
    assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
    assert streamed.headers["x-ratelimit-remaining-requests"] == "1"
    assert complete(gateway, other).headers["x-ratelimit-remaining-requests"] == "0"
    refused = complete(gateway, key)
    assert refused.status_code == 429 and f"account {account}" in refused.json()["error"]["message"]


def test_a_cleared_limit_stops_applying(gateway, db):
    key, key_id, _ = new_key(db.url)
    limit(gateway, db, key, "--key", key_id, "--rpm", "1")
    assert complete(gateway, key).status_code == 200
    assert complete(gateway, key).status_code == 429
    run_cli(db.url, "limits", "clear", "--key", key_id, "--rpm")
    assert wait_until(lambda: complete(gateway, key).status_code == 200, message="the limit to be cleared")
    assert "x-ratelimit-limit-requests" not in complete(gateway, key).headers


def test_the_limits_cli_says_what_it_did_and_refuses_what_it_cannot(db):
    _, key_id, account = new_key(db.url)
    out = run_cli(db.url, "limits", "set", "--key", key_id, "--rpm", "60", "--budget-tokens", "1000")
    assert out == f"limits of key {key_id}: rpm 60, budget_tokens 1000, period month; running gateways apply it " \
                  "within 10s\n"
    table = gateway_cli(db.url, "limits", "show", "--key", key_id).stdout.splitlines()
    assert table[0].split() == ["subject", "id", "limit", "value", "used", "remaining", "resets", "source"]
    assert [line.split()[2] for line in table[1:]] == ["rpm", "budget_tokens"]
    assert "budget_tokens 1000, period month" in run_cli(db.url, "limits", "set", "--key", key_id, "--tpm", "9")
    for args, message in [
        (("--key", "key_nobody", "--rpm", "1"), "no such key: 'key_nobody'"),
        (("--account", account, "--period", "day"), "--period is the period of a budget"),
        (("--key", key_id), "say which limits to set"),
    ]:
        result = gateway_cli(db.url, "limits", "set", *args)
        assert result.returncode == 1 and message in result.stderr, result.stderr
    assert gateway_cli(db.url, "limits", "set", "--key", key_id, "--rpm", "0").returncode == 2
    for dollars in ("-1", "0.0000000001", "1e7", "nan", "five"):  # negative, below a nano-dollar, over the cap
        assert gateway_cli(db.url, "limits", "set", "--key", key_id, "--budget-usd", dollars).returncode == 2
    for unclear in ((), ("--all", "--rpm")):
        result = gateway_cli(db.url, "limits", "clear", "--key", key_id, *unclear)
        assert result.returncode == 1 and "say what to clear" in result.stderr
    assert run_cli(db.url, "limits", "set", "--key", key_id, "--concurrent", "3").endswith(
        "rpm 60, tpm 9, concurrent 3, budget_tokens 1000, period month; running gateways apply it within 10s\n")
    assert run_cli(db.url, "limits", "clear", "--key", key_id, "--budget-tokens", "--concurrent").endswith(
        "rpm 60, tpm 9; running gateways apply it within 10s\n")
    assert "limits of key " + key_id + ": none" in run_cli(db.url, "limits", "clear", "--key", key_id, "--all")
    assert json.loads(run_cli(db.url, "limits", "show", "--key", key_id, "--format", "json")) == []
    assert ledger_rows(db.url, account) == []
