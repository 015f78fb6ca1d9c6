"""Administration over HTTP as an operator without access to the database does it, through real
gateway processes on SQLite and PostgreSQL: accounts, scoped, expiring, model-restricted keys,
rotation with a grace period, revocation (seen by a second gateway within its key cache's
lifetime), limits, prices, and the audit trail of all of it; every refusal naming what refused."""

from __future__ import annotations

import json
import secrets
import threading
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import wait_until
from tests.support.provision import run_cli, wait_for_rows

KEY_CACHE_SECONDS = 1.0  # both gateways' key cache: the lifetime a revocation must reach the other within
LIMITS_SECONDS = 0.2  # both gateways' limits (and stored prices) reread interval


@pytest.fixture(scope="module")
def admin_key(backend) -> str:
    """The first admin key, as an operator makes it: with the CLI, once."""
    run_cli(backend.url, "accounts", "create", "ops")
    made = run_cli(backend.url, "keys", "create", "--account", "ops", "--name", "platform team", "--scope", "admin",
                   "--format", "json")
    return json.loads(made)["key"]


def _env(upstream, backend):
    return gateway_env(upstream.url, backend.url, GATEWAY_KEY_CACHE_SECONDS=str(KEY_CACHE_SECONDS),
                       GATEWAY_LIMITS_CACHE_SECONDS=str(LIMITS_SECONDS))


@pytest.fixture(scope="module")
def gateways(upstream, backend):
    """Two gateway processes on one database (the same as two hosts behind a load balancer)."""
    with GatewayProcess(_env(upstream, backend)) as first, GatewayProcess(_env(upstream, backend)) as second:
        yield first, second


@pytest.fixture(scope="module")
def api(gateways, admin_key):
    with httpx.Client(base_url=gateways[0].url, headers={"x-api-key": admin_key}, timeout=30, verify=SHARED_TLS) as c:
        yield c


def complete(url: str, key: str, model: str = "fake/m", **body) -> httpx.Response:
    return httpx.post(f"{url}/v5/completions", headers={"authorization": f"Bearer {key}"},
                      json={"model": model, "prompt": "x", "max_tokens": 2} | body, timeout=30, verify=SHARED_TLS)


def new_account(api) -> str:
    account = f"team-{secrets.token_hex(4)}"
    created = api.post("/v5/admin/accounts", json={"id": account, "name": "Team"})
    assert created.status_code == 201 and created.json()["id"] == account
    return account


def test_the_operator_story_end_to_end(gateways, api, backend, admin_key):
    gateway, _ = gateways
    account = new_account(api)
    assert account in [a["id"] for a in api.get("/v5/admin/accounts").json()["data"]]
    again = api.post("/v5/admin/accounts", json={"id": account, "name": "Team"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_exists"

    # A scoped, expiring, model-restricted key, shown once.
    expires = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    made = api.post("/v5/admin/keys", json={"accounts": [account], "name": "svc", "scopes": ["inference"],
                                            "expires_at": expires.isoformat(), "models": ["fake/*"]})
    assert made.status_code == 201, made.text
    key, info = made.json()["key"], made.json()["api_key"]
    assert key.startswith("sk-gw-") and info["id"].startswith("key_")
    assert (info["scopes"], info["models"], info["state"]) == (["inference"], ["fake/*"], "active")
    assert info["expires_at"] == expires.isoformat().replace("+00:00", "Z")
    listed = api.get("/v5/admin/keys", params={"account": account})
    assert [k["id"] for k in listed.json()["data"]] == [info["id"]] and key not in listed.text

    # It works, within its allow-list and its scope only; each refusal names what refused.
    assert complete(gateway.url, key).status_code == 200
    outside = complete(gateway.url, key, model="retrying/m")
    assert outside.status_code == 403 and outside.json()["error"]["code"] == "model_not_allowed"
    assert info["id"] in outside.json()["error"]["message"]
    usage = httpx.get(f"{gateway.url}/v5/usage", headers={"x-api-key": key}, verify=SHARED_TLS)
    assert usage.status_code == 403 and usage.json()["error"]["code"] == "insufficient_scope"
    assert usage.json()["error"]["message"] == (f"key {info['id']} (svc) lacks the scope 'usage', which "
                                                "GET /v5/usage needs")
    not_admin = httpx.get(f"{gateway.url}/v5/admin/keys", headers={"x-api-key": key}, verify=SHARED_TLS)
    assert not_admin.status_code == 403 and "'admin'" in not_admin.json()["error"]["message"]

    # A budget, and its consumption beside it (the request above, once the ledger has it).
    wait_for_rows(backend.url, account, 1, where=lambda r: r["model"] == "fake/m")
    put = api.put(f"/v5/admin/limits/keys/{info['id']}", json={"budget_tokens": 1000, "rpm": 100, "period": "day",
                                                                "cache": False})
    assert put.status_code == 200, put.text
    assert put.json()["limits"] == {"rpm": 100, "tpm": None, "concurrent": None, "budget_tokens": 1000,
                                    "budget_usd": None, "period": "day", "models": ["fake/*"], "cache": False}
    uses = {row["limit"]: row for row in put.json()["consumption"]}
    assert uses["budget_tokens"]["value"] == 1000 and uses["budget_tokens"]["period"] == "day"
    assert uses["budget_tokens"]["used"] >= 3  # the request above: prompt + completion
    cleared = api.put(f"/v5/admin/limits/keys/{info['id']}", json={"rpm": None})
    assert cleared.json()["limits"]["rpm"] is None and cleared.json()["limits"]["budget_tokens"] == 1000
    budget = api.put(f"/v5/admin/limits/accounts/{account}", json={"budget_usd": 12.5})
    assert budget.status_code == 200 and budget.json()["limits"]["budget_usd"] == 12.5

    # A price, for requests from now on.
    priced = api.put("/v5/admin/prices", json={"model": "fake/admin-priced", "input": 1000, "output": 2000})
    assert priced.status_code == 200 and priced.json()["source"] == "stored"
    assert {"model": "fake/admin-priced", "input": 1000.0, "output": 2000.0, "cached_input": 1000.0} .items() <= \
        next(p for p in api.get("/v5/admin/prices").json()["data"] if p["model"] == "fake/admin-priced").items()
    answer = complete(gateway.url, key, model="fake/admin-priced")
    assert answer.status_code == 200, answer.text
    used = answer.json()["usage"]
    (row,) = wait_for_rows(backend.url, account, 1, where=lambda r: r["model"] == "fake/admin-priced")
    # $1,000 and $2,000 per 1M tokens: a thousandth and two thousandths of a dollar a token.
    assert row["cost_nanos"] == used["prompt_tokens"] * 1_000_000 + used["completion_tokens"] * 2_000_000

    # Rotation with a grace period: both keys work until it ends.
    rotated = api.post(f"/v5/admin/keys/{info['id']}/rotate", json={"grace_seconds": 3600})
    assert rotated.status_code == 201, rotated.text
    new_key, new_info, old = rotated.json()["key"], rotated.json()["api_key"], rotated.json()["replaces"]
    assert (old["state"], old["replaced_by"]) == ("rotating", new_info["id"])
    assert (new_info["scopes"], new_info["models"], new_info["name"]) == (["inference"], ["fake/*"], "svc")
    new_limits = api.get(f"/v5/admin/limits/keys/{new_info['id']}").json()["limits"]
    assert new_limits["budget_tokens"] == 1000  # its limits came along
    # (The account's budget in dollars admits priced models only: fake/m has no price.)
    unpriced = complete(gateway.url, new_key)
    assert unpriced.status_code == 403 and unpriced.json()["error"]["code"] == "model_unpriced"
    for either in (new_key, key):
        assert complete(gateway.url, either, model="fake/admin-priced").status_code == 200
    twice = api.post(f"/v5/admin/keys/{info['id']}/rotate", json={"grace_seconds": 0})
    assert twice.status_code == 409 and twice.json()["error"]["code"] == "not_active"

    # Revocation: refused at once by the gateway that revoked it (the others: test below); a second
    # revocation is a conflict.
    revoked = api.delete(f"/v5/admin/keys/{info['id']}")
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    refused = complete(gateway.url, key, model="fake/admin-priced")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"
    assert refused.json()["error"]["message"].startswith(f"key {info['id']} (svc) was replaced by {new_info['id']}")
    assert api.delete(f"/v5/admin/keys/{info['id']}").json()["error"]["code"] == "already_revoked"
    rotate_revoked = api.post(f"/v5/admin/keys/{info['id']}/rotate", json={"grace_seconds": 0})
    assert rotate_revoked.status_code == 409

    # All of it is in the audit trail, by the admin key, from this host; never a secret.
    trail = api.get("/v5/admin/audit", params={"since": (datetime.now(UTC) - timedelta(minutes=5)).isoformat()})
    mine = [(e["action"], e["object_id"]) for e in trail.json()["data"]
            if e["object_id"] in (account, info["id"], new_info["id"], "fake/admin-priced")]
    assert mine == [("account.create", account), ("key.create", info["id"]), ("limits.set", info["id"]),
                    ("limits.set", info["id"]), ("limits.set", account), ("price.set", "fake/admin-priced"),
                    ("key.rotate", info["id"]), ("key.revoke", info["id"])]
    entry = next(e for e in trail.json()["data"] if e["object_id"] == info["id"])
    assert entry["actor"] == f"key {entry['actor_key_id']} (platform team)" and entry["address"] == "127.0.0.1"
    assert key not in trail.text and new_key not in trail.text and admin_key not in trail.text


def test_a_revocation_reaches_another_gateway_within_its_key_cache(gateways, api):
    first, second = gateways
    made = api.post("/v5/admin/keys", json={"accounts": [new_account(api)], "name": "two", "scopes": ["inference"]})
    key, key_id = made.json()["key"], made.json()["api_key"]["id"]
    assert complete(second.url, key).status_code == 200  # the second gateway has it in its cache now
    assert api.delete(f"/v5/admin/keys/{key_id}").status_code == 200  # through the first
    refused = wait_until(lambda: (r := complete(second.url, key)).status_code == 401 and r,
                         timeout=KEY_CACHE_SECONDS + 10, message="the second gateway to refuse the revoked key")
    assert refused.json()["error"]["message"].startswith(f"key {key_id} (two) was revoked at ")


def test_an_expired_key_is_refused_saying_so(api, gateways):
    expires = datetime.now(UTC) + timedelta(seconds=2)
    made = api.post("/v5/admin/keys", json={"accounts": [new_account(api)], "name": "brief", "scopes": ["inference"],
                                            "expires_at": expires.isoformat()})
    key = made.json()["key"]
    refused = wait_until(lambda: (r := complete(gateways[1].url, key)).status_code == 401 and r, timeout=15,
                         message="the key to expire")
    error = refused.json()["error"]
    assert error["code"] == "key_expired" and made.json()["api_key"]["id"] in error["message"]
    past = api.post("/v5/admin/keys", json={"accounts": ["ops"], "name": "late", "scopes": ["usage"],
                                            "expires_at": "2020-01-01T00:00:00Z"})
    assert past.status_code == 422 and past.json()["error"]["param"] == "expires_at"
    assert past.json()["detail"][0]["loc"] == ["body", "expires_at"]
    assert "is not in the future" in past.json()["error"]["message"]


def test_bad_bodies_and_unknown_objects_are_named(api):
    empty = api.post("/v5/admin/keys", json={"scopes": ["root"]})
    assert empty.status_code == 422
    problems = {tuple(d["loc"]) for d in empty.json()["detail"]}
    assert {("body", "accounts"), ("body", "name"), ("body", "scopes", 0)} <= problems, problems
    unknown = api.post("/v5/admin/keys", json={"accounts": ["nobody-here"], "name": "x", "scopes": ["inference"]})
    assert unknown.status_code == 404 and "nobody-here" in unknown.json()["error"]["message"]
    assert api.get("/v5/admin/keys/key_nope").status_code == 404
    assert "key_nope" in api.put("/v5/admin/limits/keys/key_nope", json={"rpm": 1}).json()["error"]["message"]
    assert api.get("/v5/admin/limits/accounts/nobody-here").status_code == 404
    assert api.get("/v5/admin/keys", params={"account": "nobody-here"}).status_code == 404
    pattern = api.put("/v5/admin/limits/accounts/ops", json={"models": ["gpt4"]})
    assert pattern.status_code == 422 and "'gpt4' matches no model" in pattern.json()["error"]["message"]
    assert (pattern.json()["error"]["code"], pattern.json()["error"]["param"]) == ("invalid_value", "models")
    assert [(d["loc"], d["type"]) for d in pattern.json()["detail"]] == [(["body", "models"], "value_error")]
    period = api.put("/v5/admin/limits/accounts/ops", json={"period": "day"})
    assert period.status_code == 422 and period.json()["error"]["param"] == "period"
    too_much = api.put("/v5/admin/limits/accounts/ops", json={"rpm": 0, "budget_usd": -1, "bogus": 1})
    assert too_much.status_code == 422  # the contract's own checks: every problem named
    assert too_much.json()["error"]["code"] == "invalid_request_body"
    assert {tuple(d["loc"]) for d in too_much.json()["detail"]} == {("body", "rpm"), ("body", "budget_usd"),
                                                                     ("body", "bogus")}
    nothing = api.get("/v5/admin/audit")
    assert not any(e["object_id"] in ("nobody-here", "key_nope") for e in nothing.json()["data"])  # failures: no line
    patched = api.patch("/v5/admin/keys/key_nope", json={})
    assert patched.status_code == 405 and patched.headers["allow"] == "DELETE, GET, HEAD"  # the path's, all of them
    assert api.post("/v5/admin/keys/key_nope/rotate", json={"grace_seconds": -1}).status_code == 422
    assert api.post("/v5/admin/keys/key_nope/rotate", json={"grace_seconds": 5.0}).status_code == 404  # a whole number


def test_admin_calls_are_rate_limited_like_the_keys_other_requests(gateways, api, upstream):
    gateway, _ = gateways
    account = new_account(api)
    made = api.post("/v5/admin/keys", json={"accounts": [account], "name": "ci job", "scopes": ["admin", "inference"]})
    key, key_id = made.json()["key"], made.json()["api_key"]["id"]
    assert api.put(f"/v5/admin/limits/keys/{key_id}", json={"rpm": 3, "tpm": 1000}).status_code == 200
    admin = httpx.Client(base_url=gateway.url, headers={"x-api-key": key}, timeout=30, verify=SHARED_TLS)
    with admin:
        # A change answered with the object's view is one call; an error is one too, with the headers.
        served = [admin.get("/v5/admin/accounts"), admin.put(f"/v5/admin/limits/accounts/{account}", json={"rpm": 50}),
                  admin.get("/v5/admin/keys/key_nope")]
        assert [r.status_code for r in served] == [200, 200, 404]
        assert [r.headers["x-ratelimit-remaining-requests"] for r in served] == ["2", "1", "0"]
        assert served[0].headers["x-ratelimit-limit-requests"] == "3"
        assert "x-ratelimit-limit-tokens" not in served[0].headers  # tpm: administration uses no tokens
        refused = admin.post("/v5/admin/accounts", json={"id": f"{account}-2", "name": "never made"})
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == "requests_per_minute" and f"key {key_id}: 3 requests per minute" in error["message"]
        assert int(refused.headers["retry-after"]) >= 1 and refused.headers["x-should-retry"] == "true"
        # One bucket with the key's model requests; the refused call made nothing and wrote no audit line.
        assert complete(gateway.url, key).json()["error"]["code"] == "requests_per_minute"
        assert f"{account}-2" not in [a["id"] for a in api.get("/v5/admin/accounts").json()["data"]]
        assert f"{account}-2" not in api.get("/v5/admin/audit").text

        # A request in flight holds the key's only slot from its admin calls too, until it ends.
        assert api.put(f"/v5/admin/limits/keys/{key_id}", json={"rpm": None, "tpm": None,
                                                                "concurrent": 1}).status_code == 200
        wait_until(lambda: "x-ratelimit-limit-requests" not in admin.get("/v5/admin/prices").headers,
                   message="the gateway to reread the key's limits")
        answers: list[httpx.Response] = []
        held = threading.Thread(target=lambda: answers.append(complete(gateway.url, key, model="fake/held",
                                                                       stream=True, max_tokens=4)))
        held.start()
        try:
            wait_until(lambda: upstream.holding == 1, message="the stream held at the vendor")
            busy = admin.get("/v5/admin/keys", params={"account": account})
            assert busy.status_code == 429 and busy.json()["error"]["code"] == "concurrent_requests"
            assert key_id in busy.json()["error"]["message"]
        finally:
            upstream.release_held()
            held.join(30)
        assert answers[0].status_code == 200
        assert admin.get("/v5/admin/keys", params={"account": account}).status_code == 200  # the slot is free


def test_a_key_is_made_with_its_limits_in_one_call(gateways, api):
    """POST /v5/admin/keys with `limits`: the key and its limits in one transaction, so the key is
    never unlimited, not even for its first request; a refusal of any of it leaves no key."""
    gateway, _ = gateways
    account = new_account(api)
    body = {"accounts": [account], "name": "limited from birth", "scopes": ["inference"],
            "limits": {"rpm": 2, "budget_tokens": 1000, "period": "day", "models": ["fake/*"], "tpm": None}}
    made = api.post("/v5/admin/keys", json=body)
    assert made.status_code == 201, made.text
    key, info = made.json()["key"], made.json()["api_key"]
    assert info["models"] == ["fake/*"]
    shown = api.get(f"/v5/admin/limits/keys/{info['id']}").json()["limits"]
    assert (shown["rpm"], shown["budget_tokens"], shown["period"], shown["tpm"]) == (2, 1000, "day", None)
    first = complete(gateway.url, key)
    assert first.status_code == 200 and first.headers["x-ratelimit-limit-requests"] == "2"
    line = next(e for e in api.get("/v5/admin/audit").json()["data"] if e["object_id"] == info["id"])
    assert line["detail"]["limits"] == {"rpm": 2, "budget_tokens": 1000, "budget_period": "day"}

    listed = lambda: [k["id"] for k in api.get("/v5/admin/keys", params={"account": account}).json()["data"]]  # noqa: E731
    before = listed()
    no_budget = api.post("/v5/admin/keys", json=body | {"limits": {"rpm": 2, "period": "day"}})
    assert no_budget.status_code == 422 and no_budget.json()["error"]["code"] == "invalid_value"
    assert no_budget.json()["detail"][0]["loc"] == ["body", "limits", "period"]
    twice = api.post("/v5/admin/keys", json=body | {"models": ["fake/*"]})
    assert twice.status_code == 422 and twice.json()["detail"][0]["loc"] == ["body", "limits", "models"]
    unknown = api.post("/v5/admin/keys", json=body | {"limits": {"rpm": 2, "bogus": 1}})
    assert unknown.status_code == 422 and ["body", "limits", "bogus"] in [d["loc"] for d in unknown.json()["detail"]]
    assert listed() == before  # nothing half-made


def test_a_nul_anywhere_is_a_422_naming_where_it_stands(api):
    """PostgreSQL cannot store a NUL in text: it was a 503 `database_unavailable` there (and stored
    on SQLite). Now a 422 naming each place, on both, and nothing is written."""
    account = new_account(api)

    def refused(answer: httpx.Response, *where) -> None:
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] == "invalid_value"
        assert [d["loc"] for d in answer.json()["detail"]] == [list(w) for w in where]
        assert "NUL" in answer.json()["error"]["message"]

    refused(api.post("/v5/admin/accounts", json={"id": f"{account}-nul", "name": "a\x00b"}), ("body", "name"))
    refused(api.post("/v5/admin/keys", json={"accounts": [account], "name": "k\x00", "scopes": ["inference"],
                                             "limits": {"models": ["fake/*", "fake/\x00*"]}}),
            ("body", "name"), ("body", "limits", "models", 1))
    refused(api.put(f"/v5/admin/limits/accounts/{account}", json={"models": ["fake/\x00"]}), ("body", "models", 0))
    refused(api.put("/v5/admin/prices", json={"model": "fake/n\x00", "input": 1, "output": 2}), ("body", "model"))
    refused(api.get("/v5/admin/keys/key_%00"), ("path", "key_id"))
    query = api.get("/v5/admin/keys", params={"account": "a\x00"})  # (the contract's pattern refuses it already)
    assert query.status_code == 422 and [d["loc"] for d in query.json()["detail"]] == [["query", "account"]]
    assert f"{account}-nul" not in [a["id"] for a in api.get("/v5/admin/accounts").json()["data"]]
    assert api.get("/v5/admin/keys", params={"account": account}).json()["data"] == []
    assert api.get(f"/v5/admin/limits/accounts/{account}").json()["limits"]["models"] is None


def test_amounts_finer_than_kept_are_a_422_naming_them(api):
    """A budget is kept to the nano-dollar and a price to the pico-dollar per token (six decimals
    of dollars per 1M tokens): more decimals were rounded away, to 0 for an amount below the unit."""
    account = new_account(api)
    for budget in (0.0000000001, 12.3456789012):
        finer = api.put(f"/v5/admin/limits/accounts/{account}", json={"budget_usd": budget})
        assert finer.status_code == 422, finer.text
        assert (finer.json()["error"]["code"], finer.json()["error"]["param"]) == ("invalid_value", "budget_usd")
        assert "more than 9 decimals" in finer.json()["error"]["message"]
    made = api.post("/v5/admin/keys", json={"accounts": [account], "name": "fine", "scopes": ["inference"],
                                            "limits": {"budget_usd": 0.0000000004}})
    assert made.status_code == 422 and made.json()["detail"][0]["loc"] == ["body", "limits", "budget_usd"]
    kept = api.put(f"/v5/admin/limits/accounts/{account}", json={"budget_usd": 12.345678901})
    assert kept.status_code == 200 and kept.json()["limits"]["budget_usd"] == 12.345678901
    assert api.put(f"/v5/admin/limits/accounts/{account}", json={"budget_usd": None}).status_code == 200
    for rate in ("input", "output", "cached_input"):
        price = api.put("/v5/admin/prices", json={"model": "fake/finer", "input": 1, "output": 2} | {rate: 0.0000001})
        assert price.status_code == 422, price.text
        assert (price.json()["error"]["code"], price.json()["error"]["param"]) == ("invalid_value", rate)
        assert "more than 6 decimals" in price.json()["error"]["message"]
    assert "fake/finer" not in [p["model"] for p in api.get("/v5/admin/prices").json()["data"]]
    exact = api.put("/v5/admin/prices", json={"model": "fake/finer", "input": 0.000001, "output": 2.5})
    assert exact.status_code == 200 and (exact.json()["input"], exact.json()["output"]) == (0.000001, 2.5)
