"""A key's rotation through real gateways, on SQLite (one gateway) and on PostgreSQL with Redis (two
gateways sharing both): a key has one successor however many rotations are asked for at once; the
successor spends from its predecessor's budget, one budget for the two, on every gateway and from
the ledger alike; and the old key stops exactly when its grace ends, on a gateway that knew it
from before the rotation too. The keys' and limits' clock is a file the test moves."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from datetime import datetime

import httpx
import pytest

from tests.support.clocks import FileClock
from tests.support.environments import SHARED_TLS
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import postgres_unavailable, wait_for_rows
from tests.support.sites import Site, at_once, site

KEY_CACHE_SECONDS = 30


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def gateways(request, upstream, tmp_path_factory):
    if request.param == "postgresql" and (reason := postgres_unavailable()):
        pytest.skip(reason)
    clock = FileClock(str(tmp_path_factory.mktemp("clock") / "now"))
    with site(request.param, upstream.url, clock, GATEWAY_KEY_CACHE_SECONDS=str(KEY_CACHE_SECONDS),
              GATEWAY_LIMITS_CACHE_SECONDS="3600") as made:
        yield made


def complete(url: str, key: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/v5/completions", headers={"x-api-key": key}, timeout=30, verify=SHARED_TLS,
                      json={"model": "fake/m", "prompt": "x", "max_tokens": 2} | body)


def rotate(gateways: Site, key_id: str, grace: int) -> httpx.Response:
    return gateways.admin.post(f"/v5/admin/keys/{key_id}/rotate", json={"grace_seconds": grace})


def test_rotations_at_once_make_one_successor(gateways):
    account = gateways.new_account()
    _, key_id = gateways.new_key({"rpm": 100}, account)
    admin = dict(gateways.admin.headers)
    answers = asyncio.run(at_once(gateways.urls, 8, "POST", f"/v5/admin/keys/{key_id}/rotate",
                                  {"x-api-key": admin["x-api-key"]}, {"grace_seconds": 3600}))
    assert Counter(status for status, _, _ in answers) == {201: 1, 409: 7}, [text for _, _, text in answers]
    refusals = [json.loads(text)["error"] for status, _, text in answers if status == 409]
    assert {error["code"] for error in refusals} == {"not_active"}
    successor = next(json.loads(text)["api_key"]["id"] for status, _, text in answers if status == 201)
    assert all(f"replaced by {successor}" in error["message"] for error in refusals)
    keys = gateways.admin.get("/v5/admin/keys", params={"account": account}).json()["data"]
    assert sorted((k["id"], k["state"], k["replaced_by"]) for k in keys) == sorted(
        [(key_id, "rotating", successor), (successor, "active", None)])


def test_the_successor_spends_from_its_predecessors_budget(gateways, upstream):
    account = gateways.new_account()
    key, key_id = gateways.new_key({"budget_tokens": 30, "period": "day"}, account)
    body = {"prompt": "a b c d", "max_tokens": 10}  # reserves 4 + 10, uses 4 + 10
    assert [complete(gateways.urls[0], key, **body).status_code for _ in range(2)] == [200, 200]
    rotated = rotate(gateways, key_id, 3600)
    assert rotated.status_code == 201, rotated.text
    successor = rotated.json()["key"]
    spent = complete(gateways.urls[-1], successor, **body)
    assert spent.status_code == 429, spent.text
    assert spent.json()["error"]["code"] == "budget_exceeded" and "28 used" in spent.json()["error"]["message"]
    assert complete(gateways.urls[-1], successor, prompt="a", max_tokens=1).status_code == 200  # 28 + 2: all of it
    assert complete(gateways.urls[0], key, prompt="a", max_tokens=1).status_code == 429  # one budget: spent
    shown = gateways.admin.get(f"/v5/admin/limits/keys/{rotated.json()['api_key']['id']}").json()["consumption"]
    assert next(row for row in shown if row["limit"] == "budget_tokens")["used"] == 30

    # A gateway that has counted none of it starts from the ledger: the predecessor's rows and the successor's.
    wait_for_rows(gateways.database_url, account, 3, where=lambda row: row["outcome"] == "completed")
    alone = {name: value for name, value in gateways.env.items() if name not in ("GATEWAY_REDIS_URL", "GATEWAY_CACHE")}
    with GatewayProcess(alone, module="tests.support.clocked_gateway") as fresh:
        refused = complete(fresh.url, successor, prompt="a", max_tokens=1)
        assert refused.status_code == 429 and "30 used" in refused.json()["error"]["message"]


def test_a_grace_shorter_than_the_key_cache_is_refused_naming_it(gateways):
    _, key_id = gateways.new_key({"rpm": 100})
    short = rotate(gateways, key_id, KEY_CACHE_SECONDS - 1)
    assert short.status_code == 422, short.text
    error = short.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_value", "grace_seconds")
    assert "GATEWAY_KEY_CACHE_SECONDS" in error["message"] and short.json()["detail"][0]["loc"] == [
        "body", "grace_seconds"]
    now = rotate(gateways, key_id, 0)  # 0: the old key revoked at once, as a revocation
    assert now.status_code == 201 and now.json()["replaces"]["state"] == "revoked"


def test_the_grace_ends_exactly_on_a_gateway_that_knew_the_key_before(gateways):
    """The last gateway has the old key in its key cache from before the rotation, made through the
    first: the old key works there until the instant the grace ends, and not after it."""
    key, key_id = gateways.new_key({"rpm": 100})
    knowing = gateways.urls[-1]
    gateways.clock.set(time.time())  # the keys' clock where the database's is: rotations are stamped by it
    assert complete(knowing, key).status_code == 200
    rotated = rotate(gateways, key_id, KEY_CACHE_SECONDS)
    assert rotated.status_code == 201, rotated.text
    ends = datetime.fromisoformat(rotated.json()["replaces"]["revoked_at"].replace("Z", "+00:00")).timestamp()
    gateways.clock.set(ends - 0.001)
    assert complete(knowing, key).status_code == 200
    gateways.clock.set(ends)
    refused = complete(knowing, key)
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"]["message"].startswith(f"key {key_id} (fresh) was replaced by ")
    assert complete(knowing, rotated.json()["key"]).status_code == 200
