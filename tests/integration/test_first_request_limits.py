"""A key's limits hold from its very first request, at any concurrency, on every gateway: a key made
with limits or an allow-list (POST /v5/admin/keys `limits`, `gateway keys create --rpm`, a
rotation's copy) meets twenty requests at once on gateways that have never seen it, and exactly
what its limits allow is served. On SQLite (one gateway, counters in its memory) and on PostgreSQL
with Redis (two gateways sharing both, the requests spread over them). The gateways reread the
limits table only once an hour here: nothing but the key's own first requests can tell them."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import Counter

import httpx
import pytest

from tests.support.clocks import FileClock
from tests.support.environments import SHARED_TLS
from tests.support.provision import postgres_unavailable, run_cli
from tests.support.sites import Site, at_once, site

AT_ONCE = 20


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def gateways(request, upstream, tmp_path_factory):
    if request.param == "postgresql" and (reason := postgres_unavailable()):
        pytest.skip(reason)
    clock = FileClock(str(tmp_path_factory.mktemp("clock") / "now"))  # held still: no bucket refills
    with site(request.param, upstream.url, clock, GATEWAY_LIMITS_CACHE_SECONDS="3600") as made:
        yield made


def completions(gateways: Site, key: str, body: dict, **held) -> list:
    return asyncio.run(at_once(gateways.urls, AT_ONCE, "POST", "/v5/completions", {"x-api-key": key}, body, **held))


def statuses(answers) -> Counter:
    return Counter(status for status, _, _ in answers)


def codes(answers) -> Counter:
    return Counter(json.loads(text)["error"]["code"] for status, _, text in answers if status != 200)


def test_requests_per_minute_hold_from_the_first_request(gateways):
    key, _ = gateways.new_key({"rpm": 2})
    answers = completions(gateways, key, {"model": "fake/m", "prompt": "rpm", "max_tokens": 2})
    assert statuses(answers) == {200: 2, 429: AT_ONCE - 2}
    assert codes(answers) == {"requests_per_minute": AT_ONCE - 2}


def test_requests_in_flight_hold_from_the_first_request(gateways, upstream):
    key, _ = gateways.new_key({"concurrent": 1})
    body = {"model": "fake/held", "prompt": "in flight", "max_tokens": 4, "stream": True}
    # The one let through is held at the vendor until every other one has been answered.
    answers = completions(gateways, key, body, until=AT_ONCE - 1, then=upstream.release_held)
    assert statuses(answers) == {200: 1, 429: AT_ONCE - 1}
    assert codes(answers) == {"concurrent_requests": AT_ONCE - 1}
    assert sum(r["body"].get("prompt") == "in flight" for r in upstream.requests) == 1


def test_a_token_budget_holds_from_the_first_request(gateways, upstream):
    key, _ = gateways.new_key({"budget_tokens": 30, "period": "day"})
    # Each reserves 4 prompt tokens + 10: two fit in 30, a third never.
    answers = completions(gateways, key, {"model": "fake/m", "prompt": "a b c budget", "max_tokens": 10})
    assert statuses(answers) == {200: 2, 429: AT_ONCE - 2}
    assert set(codes(answers)) <= {"budget_exceeded", "budget_in_flight"}
    assert sum(r["body"].get("prompt") == "a b c budget" for r in upstream.requests) == 2


def test_an_allow_list_holds_from_the_first_request(gateways, upstream):
    key, _ = gateways.new_key({"models": ["fake/allowed-*"]})
    answers = completions(gateways, key, {"model": "fake/elsewhere", "prompt": "outside", "max_tokens": 2})
    assert statuses(answers) == {403: AT_ONCE}
    assert codes(answers) == {"model_not_allowed": AT_ONCE}
    assert not any(r["body"].get("prompt") == "outside" for r in upstream.requests)


def test_the_cache_switch_holds_from_the_first_request(gateways):
    """A key made with the cache off is never answered from its account's entries."""
    account = gateways.new_account()
    body = {"model": "fake/m", "prompt": "cached answer", "max_tokens": 2, "temperature": 0}
    other, _ = gateways.new_key({"rpm": 1000}, account)
    for url in gateways.urls:  # the entry, on every gateway (each keeps its own in memory on SQLite here)
        httpx.post(f"{url}/v5/completions", headers={"x-api-key": other}, json=body, verify=SHARED_TLS)
    assert httpx.post(f"{gateways.urls[0]}/v5/completions", headers={"x-api-key": other}, json=body,
                      verify=SHARED_TLS).headers["x-gateway-cache"] == "hit"
    key, _ = gateways.new_key({"cache": False}, account)
    answers = completions(gateways, key, body)
    assert statuses(answers) == {200: AT_ONCE}
    assert Counter(headers["x-gateway-cache"] for _, headers, _ in answers) == {"bypass": AT_ONCE}


def test_a_key_made_by_the_cli_with_limits_holds_from_the_first_request(gateways):
    run_cli(gateways.database_url, "accounts", "create", account := f"cli-{secrets.token_hex(4)}")
    made = json.loads(run_cli(gateways.database_url, "keys", "create", "--account", account, "--rpm", "3",
                              "--format", "json"))
    answers = completions(gateways, made["key"], {"model": "fake/m", "prompt": "cli", "max_tokens": 2})
    assert statuses(answers) == {200: 3, 429: AT_ONCE - 3}


def test_a_rotated_keys_successor_holds_its_limits_from_the_first_request(gateways, upstream):
    key, key_id = gateways.new_key({"models": ["fake/allowed-*"], "cache": False})
    rotated = gateways.admin.post(f"/v5/admin/keys/{key_id}/rotate", json={"grace_seconds": 3600})
    assert rotated.status_code == 201, rotated.text
    successor = rotated.json()["key"]
    answers = completions(gateways, successor, {"model": "fake/elsewhere", "prompt": "successor", "max_tokens": 2})
    assert statuses(answers) == {403: AT_ONCE}
    assert not any(r["body"].get("prompt") == "successor" for r in upstream.requests)
    shown = gateways.admin.get(f"/v5/admin/limits/keys/{rotated.json()['api_key']['id']}").json()["limits"]
    assert (shown["models"], shown["cache"]) == (["fake/allowed-*"], False)  # the cache switch came along too
