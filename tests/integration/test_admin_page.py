"""The keys page (/ui/admin.html) and the dashboard for an admin, in a real headless Chromium against a
real gateway: create a key (shown once, copyable), rotate it, revoke the old one, set a limit; the
dashboard's key names; both pages usable 390 px wide. Screenshots are kept in .artifacts/."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.browser import screenshot
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import off_loop
from tests.support.provision import empty_database, provision, run_cli

NARROW = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def site(upstream):
    with empty_database("sqlite") as url:
        db = off_loop(provision, url)
        made = off_loop(run_cli, url, "keys", "create", "--account", "acct-a", "--name", "platform team",
                        "--scope", "admin", "--scope", "usage", "--format", "json")
        with GatewayProcess(gateway_env(upstream.url, url, GATEWAY_KEY_CACHE_SECONDS="0.2")) as gateway:
            yield {"gateway": gateway, "db": db, "url": url, "admin": json.loads(made)}


def wait_ready(page, action) -> None:
    before = page.evaluate("document.body.dataset.generation || ''")
    action()
    page.wait_for_function("g => document.body.dataset.state === 'ready' && document.body.dataset.generation !== g",
                           arg=before)


def sign_in(page, url: str, key: str, path: str = "admin.html") -> None:
    page.goto(f"{url}/ui/{path}")
    page.fill("#api-key", key)
    wait_ready(page, lambda: page.click("#sign-in-form button[type=submit]"))


def key_rows(page) -> list[list[str]]:
    return page.eval_on_selector_all("#keys tr:not(:first-child)",
                                     "rows => rows.map(r => [...r.cells].slice(0, 5).map(c => c.textContent))")


def complete(url: str, key: str) -> int:
    return httpx.post(f"{url}/v5/completions", headers={"x-api-key": key}, verify=SHARED_TLS, timeout=30,
                      json={"model": "fake/m", "prompt": "x", "max_tokens": 2}).status_code


def test_an_admin_creates_rotates_and_revokes_a_key_and_sets_its_limits(page, site):
    gateway = site["gateway"]
    sign_in(page, gateway.url, site["admin"]["key"])
    assert page.text_content("#key-id") == f"platform team ({site['admin']['id']})"

    page.fill("#create-name", "ci bot")
    page.select_option("#create-accounts", ["acct-a"])
    page.uncheck("input[name=scope][value=usage]")
    page.fill("#create-models", "fake/*")
    page.fill("#create-rpm", "30")
    wait_ready(page, lambda: page.click("#create-form button[type=submit]"))
    created = page.text_content("#new-key-value")
    assert created.startswith("sk-gw-") and page.is_visible("#new-key")
    (row, *_) = [r for r in key_rows(page) if r[0] == "ci bot"]
    key_id = row[1]
    assert row[2:] == ["acct-a", "inference", "active"]
    made = httpx.get(f"{gateway.url}/v5/admin/limits/keys/{key_id}", headers={"x-api-key": site["admin"]["key"]},
                     verify=SHARED_TLS).json()["limits"]
    assert (made["rpm"], made["models"]) == (30, ["fake/*"])  # made with the key
    assert complete(gateway.url, created) == 200
    page.click("#copy-key")
    page.wait_for_function("() => document.getElementById('copied').textContent !== ''")
    screenshot(page, "admin-new-key")
    page.click("#dismiss-key")
    assert not page.is_visible("#new-key") and created not in page.content()  # shown once, then gone

    wait_ready(page, lambda: page.click(f"button[data-rotate='{key_id}']"))
    rotated = page.text_content("#new-key-value")
    assert rotated.startswith("sk-gw-") and rotated != created
    states = {r[1]: r[4] for r in key_rows(page)}
    assert states[key_id] == "rotating" and complete(gateway.url, created) == 200  # within its grace
    new_id = next(i for i, r in ((r[1], r) for r in key_rows(page)) if r[0] == "ci bot" and i != key_id)
    assert complete(gateway.url, rotated) == 200

    revoke = f"button[data-revoke='{key_id}']"
    page.click(revoke)
    assert page.text_content(revoke) == "Confirm revoke"  # nothing is revoked by one stray click
    wait_ready(page, lambda: page.click(revoke))
    assert {r[1]: r[4] for r in key_rows(page)}[key_id] == "revoked"

    wait_ready(page, lambda: page.select_option("#limits-key", new_id))
    assert page.input_value("#limit-rpm") == "30"  # its limits as they are, copied by the rotation
    page.fill("#limit-rpm", "5")
    wait_ready(page, lambda: page.click("#limits-form button[type=submit]"))
    limits = page.eval_on_selector_all("#limits tr:not(:first-child)",
                                       "rows => rows.map(r => [...r.cells].slice(0, 2).map(c => c.textContent))")
    assert limits == [["rpm", "5"], ["models", "fake/*"]]  # the allow-list came along with the rotation
    screenshot(page, "admin-keys")

    trail = httpx.get(f"{gateway.url}/v5/admin/audit", headers={"x-api-key": site["admin"]["key"]},
                      verify=SHARED_TLS).json()["data"]
    assert [e["action"] for e in trail if e["object_id"] in (key_id, new_id)] == [
        "key.create", "key.rotate", "key.revoke", "limits.set"]


EVERY_LIMIT = {"rpm": 30, "tpm": 5000, "concurrent": 3, "budget_tokens": 100000, "budget_usd": 2.5, "period": "day",
               "models": ["fake/*", "local/*"], "cache": False}


def limits_form(page) -> dict[str, str]:
    return page.evaluate("() => Object.fromEntries([...document.querySelectorAll('[id^=limit-]')]"
                         ".filter(f => f.id !== 'limits-key').map(f => [f.id.slice(6), f.value]))")


def test_the_limits_form_shows_a_keys_limits_and_sends_only_what_changed(page, site):
    gateway, admin = site["gateway"], site["admin"]
    with httpx.Client(base_url=gateway.url, headers={"x-api-key": admin["key"]}, verify=SHARED_TLS, timeout=30) as api:
        made = api.post("/v5/admin/keys", json={"name": "fully limited", "accounts": ["acct-a"],
                                                "scopes": ["inference"]})
        key_id = made.json()["api_key"]["id"]
        assert api.put(f"/v5/admin/limits/keys/{key_id}", json=EVERY_LIMIT).status_code == 200
        sent: list[dict] = []
        page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.method == "PUT" else None)
        sign_in(page, gateway.url, admin["key"])
        wait_ready(page, lambda: page.select_option("#limits-key", key_id))
        assert limits_form(page) == {"rpm": "30", "tpm": "5000", "concurrent": "3", "budget_tokens": "100000",
                                     "budget_usd": "2.5", "period": "day", "models": "fake/* local/*", "cache": "off"}
        assert page.is_disabled("#limits-form button[type=submit]")  # nothing changed: nothing to send
        page.locator("#limits-form").scroll_into_view_if_needed()
        screenshot(page, "admin-limits-shown")

        page.fill("#limit-rpm", "45")
        assert page.eval_on_selector("#limit-rpm", "f => f.classList.contains('changed')")
        wait_ready(page, lambda: page.click("#limits-form button[type=submit]"))
        assert sent == [{"rpm": 45}]
        assert api.get(f"/v5/admin/limits/keys/{key_id}").json()["limits"] == EVERY_LIMIT | {"rpm": 45}

        # Limits removed on purpose: their fields emptied, each sent as null, and nothing else.
        page.fill("#limit-tpm", "")
        page.fill("#limit-models", "")
        page.select_option("#limit-cache", "")
        screenshot(page, "admin-limits-changing")
        wait_ready(page, lambda: page.click("#limits-form button[type=submit]"))
        assert sent[1:] == [{"tpm": None, "models": None, "cache": None}]
        left = EVERY_LIMIT | {"rpm": 45, "tpm": None, "models": None, "cache": None}
        assert api.get(f"/v5/admin/limits/keys/{key_id}").json()["limits"] == left
        assert limits_form(page) == {"rpm": "45", "tpm": "", "concurrent": "3", "budget_tokens": "100000",
                                     "budget_usd": "2.5", "period": "day", "models": "", "cache": ""}

        # The budgets removed: their period goes with them, unsent.
        page.fill("#limit-budget_tokens", "")
        page.fill("#limit-budget_usd", "")
        wait_ready(page, lambda: page.click("#limits-form button[type=submit]"))
        assert sent[2:] == [{"budget_tokens": None, "budget_usd": None}]
        assert api.get(f"/v5/admin/limits/keys/{key_id}").json()["limits"] == left | {
            "budget_tokens": None, "budget_usd": None, "period": None}
        screenshot(page, "admin-limits-saved")


def test_the_pages_fit_a_phone_and_name_the_keys(page, site):
    gateway, admin = site["gateway"], site["admin"]
    assert complete(gateway.url, site["db"].key) == 200  # a line for the per-key table
    page.set_viewport_size(NARROW)
    sign_in(page, gateway.url, admin["key"], path="")
    assert page.is_visible("#admin-link")  # the key has the admin scope
    page.wait_for_function("() => document.querySelectorAll('#by-key tr').length > 1")
    assert page.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]  # nothing sticks out
    header = page.eval_on_selector("#by-model th:nth-child(4)", "th => th.getBoundingClientRect().height")
    line = page.eval_on_selector("#by-model th:nth-child(4)", "th => parseFloat(getComputedStyle(th).lineHeight) "
                                 "|| parseFloat(getComputedStyle(th).fontSize) * 1.4")
    assert header < 2 * line  # "Prompt tokens" on one line, not a letter per line
    screenshot(page, "dashboard-390px")

    page.goto(f"{gateway.url}/ui/admin.html")  # the same tab: still signed in
    page.wait_for_function("() => document.body.dataset.state === 'ready'")
    assert page.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]
    screenshot(page, "admin-390px")


def test_a_key_without_the_admin_scope_is_told_so(page, site):
    page.goto(f"{site['gateway'].url}/ui/admin.html")
    page.fill("#api-key", site["db"].key)
    page.click("#sign-in-form button[type=submit]")
    page.wait_for_selector("#sign-in-error:not([hidden])")
    assert "lacks the scope 'admin'" in page.text_content("#sign-in-error")
