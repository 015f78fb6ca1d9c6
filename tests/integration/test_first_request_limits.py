"""A key's limits hold from its very first request, at any concurrency, on every gateway: a key made
with limits or an allow-list (POST /v5/admin/keys `limits`, `gateway keys create --rpm`, a
rotation's copy) meets twenty requests at once on gateways that have never seen it, and exactly
what its limits allow is served. On SQLite (one gateway, counters in its memory) and on PostgreSQL
with Redis (two gateways sharing both, the requests spread over them). The gateways reread the
limits table only once an hour here: nothing but the key's own first request can tell them."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import Counter
from dataclasses import dataclass

import aiohttp
import httpx
import pytest

from tests.support.clocks import FileClock
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import empty_database, postgres_unavailable, provision, run_cli
from tests.support.redis_servers import redis_prefix, redis_url, remove_redis_keys

AT_ONCE = 20


@dataclass
class Site:
    urls: list[str]  # the gateways, every one fresh to the keys a test makes
    database_url: str
    admin: httpx.Client  # an admin key's client of the first gateway


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def site(request, upstream, tmp_path_factory):
    kind = request.param
    if kind == "postgresql" and (reason := postgres_unavailable()):
        pytest.skip(reason)
    clock = FileClock(str(tmp_path_factory.mktemp("clock") / "now"))  # held still: no bucket refills
    prefix = redis_prefix()
    with empty_database(kind) as url:
        provision(url)
        run_cli(url, "accounts", "create", "ops")
        admin_key = json.loads(run_cli(url, "keys", "create", "--account", "ops", "--scope", "admin",
                                       "--format", "json"))["key"]
        shared = {"GATEWAY_REDIS_URL": redis_url(), "GATEWAY_REDIS_PREFIX": prefix, "GATEWAY_CACHE": "redis"} \
            if kind == "postgresql" else {"GATEWAY_CACHE": "memory"}
        env = gateway_env(upstream.url, url, GATEWAY_LIMITS_CACHE_SECONDS="3600", GATEWAY_VALIDATE_RESPONSES="0",
                          **clock.env, **shared)
        count = 2 if kind == "postgresql" else 1
        gateways = [GatewayProcess(env, module="tests.support.clocked_gateway") for _ in range(count)]
        try:
            for gateway in gateways:
                gateway.start()
            with httpx.Client(base_url=gateways[0].url, headers={"x-api-key": admin_key}, timeout=30,
                              verify=SHARED_TLS) as admin:
                yield Site([g.url for g in gateways], url, admin)
        finally:
            for gateway in gateways:
                gateway.stop()
            remove_redis_keys(prefix)


def new_account(site: Site) -> str:
    account = f"team-{secrets.token_hex(4)}"
    assert site.admin.post("/v5/admin/accounts", json={"id": account, "name": "t"}).status_code == 201
    return account


def made_with(site: Site, limits: dict, account: str | None = None) -> tuple[str, str]:
    """A key made over HTTP with `limits` in its own transaction: (key, key id)."""
    made = site.admin.post("/v5/admin/keys", json={"accounts": [account or new_account(site)], "name": "fresh",
                                                   "scopes": ["inference"], "limits": limits})
    assert made.status_code == 201, made.text
    return made.json()["key"], made.json()["api_key"]["id"]


async def at_once(urls: list[str], key: str, body: dict, headers: dict | None = None,
                  until: int | None = None, then=None) -> list[tuple[int, dict, str]]:
    """AT_ONCE requests on connections opened beforehand (each a connection of its own, spread over
    `urls`), sent together once every connection is open: (status, headers, body) of each. With
    `until`, `then()` is called once that many have been answered (a held stream's release)."""
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) for _ in range(AT_ONCE)]
    try:
        await asyncio.gather(*(s.get(f"{urls[i % len(urls)]}/healthz") for i, s in enumerate(sessions)))
        go = asyncio.Event()

        async def one(i: int) -> tuple[int, dict, str]:
            await go.wait()
            async with sessions[i].post(f"{urls[i % len(urls)]}/v5/completions",
                                        headers={"x-api-key": key} | (headers or {}), json=body) as r:
                return r.status, dict(r.headers), await r.text()

        tasks = [asyncio.ensure_future(one(i)) for i in range(AT_ONCE)]
        go.set()
        if until is not None:
            pending = set(tasks)
            while len(tasks) - len(pending) < until and pending:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            then()
        return await asyncio.gather(*tasks)
    finally:
        await asyncio.gather(*(s.close() for s in sessions))


def statuses(answers) -> Counter:
    return Counter(status for status, _, _ in answers)


def codes(answers) -> Counter:
    return Counter(json.loads(text)["error"]["code"] for status, _, text in answers if status != 200)


def test_requests_per_minute_hold_from_the_first_request(site):
    key, _ = made_with(site, {"rpm": 2})
    answers = asyncio.run(at_once(site.urls, key, {"model": "fake/m", "prompt": "rpm", "max_tokens": 2}))
    assert statuses(answers) == {200: 2, 429: AT_ONCE - 2}
    assert codes(answers) == {"requests_per_minute": AT_ONCE - 2}


def test_requests_in_flight_hold_from_the_first_request(site, upstream):
    key, _ = made_with(site, {"concurrent": 1})
    body = {"model": "fake/held", "prompt": "in flight", "max_tokens": 4, "stream": True}
    # The one let through is held at the vendor until every other one has been answered.
    answers = asyncio.run(at_once(site.urls, key, body, until=AT_ONCE - 1, then=upstream.release_held))
    assert statuses(answers) == {200: 1, 429: AT_ONCE - 1}
    assert codes(answers) == {"concurrent_requests": AT_ONCE - 1}
    assert sum(r["body"].get("prompt") == "in flight" for r in upstream.requests) == 1


def test_a_token_budget_holds_from_the_first_request(site, upstream):
    key, _ = made_with(site, {"budget_tokens": 30, "period": "day"})
    # Each reserves 4 prompt tokens + 10: two fit in 30, a third never.
    answers = asyncio.run(at_once(site.urls, key, {"model": "fake/m", "prompt": "a b c budget", "max_tokens": 10}))
    assert statuses(answers) == {200: 2, 429: AT_ONCE - 2}
    assert set(codes(answers)) <= {"budget_exceeded", "budget_in_flight"}
    assert sum(r["body"].get("prompt") == "a b c budget" for r in upstream.requests) == 2


def test_an_allow_list_holds_from_the_first_request(site, upstream):
    key, _ = made_with(site, {"models": ["fake/allowed-*"]})
    answers = asyncio.run(at_once(site.urls, key, {"model": "fake/elsewhere", "prompt": "outside", "max_tokens": 2}))
    assert statuses(answers) == {403: AT_ONCE}
    assert codes(answers) == {"model_not_allowed": AT_ONCE}
    assert not any(r["body"].get("prompt") == "outside" for r in upstream.requests)


def test_the_cache_switch_holds_from_the_first_request(site, upstream):
    """A key made with the cache off is never answered from its account's entries."""
    account = new_account(site)
    body = {"model": "fake/m", "prompt": "cached answer", "max_tokens": 2, "temperature": 0}
    other, _ = made_with(site, {"rpm": 1000}, account)
    for url in site.urls:  # the entry, on every gateway (each keeps its own in memory on SQLite here)
        httpx.post(f"{url}/v5/completions", headers={"x-api-key": other}, json=body, verify=SHARED_TLS)
    assert httpx.post(f"{site.urls[0]}/v5/completions", headers={"x-api-key": other}, json=body,
                      verify=SHARED_TLS).headers["x-gateway-cache"] == "hit"
    key, _ = made_with(site, {"cache": False}, account)
    answers = asyncio.run(at_once(site.urls, key, body))
    assert statuses(answers) == {200: AT_ONCE}
    assert Counter(headers["x-gateway-cache"] for _, headers, _ in answers) == {"bypass": AT_ONCE}


def test_a_key_made_by_the_cli_with_limits_holds_from_the_first_request(site):
    run_cli(site.database_url, "accounts", "create", account := f"cli-{secrets.token_hex(4)}")
    made = json.loads(run_cli(site.database_url, "keys", "create", "--account", account, "--rpm", "3",
                              "--format", "json"))
    answers = asyncio.run(at_once(site.urls, made["key"], {"model": "fake/m", "prompt": "cli", "max_tokens": 2}))
    assert statuses(answers) == {200: 3, 429: AT_ONCE - 3}


def test_a_rotated_keys_successor_holds_its_limits_from_the_first_request(site, upstream):
    key, key_id = made_with(site, {"models": ["fake/allowed-*"], "rpm": 1000})
    rotated = site.admin.post(f"/v5/admin/keys/{key_id}/rotate", json={"grace_seconds": 3600})
    assert rotated.status_code == 201, rotated.text
    successor = rotated.json()["key"]
    answers = asyncio.run(at_once(site.urls, successor, {"model": "fake/elsewhere", "prompt": "successor",
                                                         "max_tokens": 2}))
    assert statuses(answers) == {403: AT_ONCE}
    assert not any(r["body"].get("prompt") == "successor" for r in upstream.requests)
