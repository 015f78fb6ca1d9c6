"""The usage dashboard at /ui/, in a real headless Chromium against a real gateway: known ledger rows
are seeded (through the ledger's writer, so the rollups have them too), a person signs in with a key,
and every figure the page shows is checked against the ledger's rows, read straight from the database.
Screenshots are kept in .artifacts/ for a person to look at."""

from __future__ import annotations

import asyncio
import json
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from gateway.store import database
from gateway.store.accounts import bootstrap
from gateway.store.ledger import Ledger
from gateway.store.prices import Prices
from tests.support.browser import screenshot
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import off_loop
from tests.support.provision import empty_database, ledger_rows, provision, run_cli

PRICED = "openai/gpt-3.5-turbo-instruct"  # in the packaged table
CACHED = "anthropic/claude-sonnet-4-6"  # priced, with a cached-input rate
UNPRICED = "fake/house-model"  # in no table


def _row(n: int, account: str, key_id: str, model: str, started: datetime, prompt: int, completion: int,
         user: str | None, cached: int | None = None) -> dict:
    cost = Prices.load().cost_nanos(model, prompt, completion, cached, started)
    return {"request_id": f"cmpl-seed-{n}", "account_id": account, "key_id": key_id, "vendor": model.split("/")[0],
            "model": model, "fallback_from": None, "prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion, "cached_tokens": cached, "reasoning_tokens": None,
            "estimated": False, "outcome": "completed", "streamed": False, "end_user": user, "started_at": started,
            "ended_at": started, "ttft_ms": None, "cost_nanos": cost}


def _seed(url: str, rows: list[dict]) -> None:
    async def write() -> None:
        engine = database.connect(url)
        try:
            await database.prepare(engine, bootstrap)
            ledger = Ledger(engine, max_pending=len(rows) + 1)
            ledger.start()
            for row in rows:
                ledger.add(dict(row))
            await ledger.close()
        finally:
            await engine.dispose()

    asyncio.run(write())


@pytest.fixture(scope="module")
def dashboard(upstream):
    """A gateway on a database with known rows on two accounts: recent ones (inside the page's
    default 30 days however the day turns while the test runs) and one 60 days old."""
    with empty_database("sqlite") as url:
        db = off_loop(provision, url)  # db.key grants acct-a; db.multi_key grants acct-a and acct-b
        listed = json.loads(off_loop(run_cli, url, "keys", "list", "--format", "json"))
        keys = {k["accounts"]: k["id"] for k in listed}
        single, multi = keys["acct-a"], keys["acct-a acct-b"]
        now = datetime.now(UTC).replace(microsecond=0)
        day = timedelta(days=1)
        rows = [
            _row(1, "acct-a", single, PRICED, now - timedelta(minutes=1), 1200, 300, "alice"),
            _row(2, "acct-a", multi, PRICED, now - 2 * day, 40_000, 2_500, "bob"),
            _row(3, "acct-a", single, UNPRICED, now - 2 * day, 700, 70, None),
            _row(4, "acct-b", multi, CACHED, now - 5 * day, 9_000, 1_000, "alice", cached=6_000),
            _row(5, "acct-b", multi, UNPRICED, now - 12 * day, 333, 33, "<b>carol</b>"),  # text, never markup
            _row(6, "acct-b", multi, PRICED, now - 60 * day, 5_000, 500, "dave"),
        ]
        off_loop(_seed, url, rows)
        with GatewayProcess(gateway_env(upstream.url, url)) as gateway:
            yield {"gateway": gateway, "db": db, "url": url, "keys": keys, "now": now}


# -- what the page should show, from the ledger's rows ---------------------------------------------
def tokens(count: int) -> str:
    return f"{count:,}"


def usd(nanos: int) -> str:
    whole, fraction = divmod(nanos, 10**9)
    digits = f"{fraction:09d}".rstrip("0").ljust(2, "0")
    return f"${whole:,}.{digits}"


def figures(rows: list[dict]) -> dict:
    priced = [r for r in rows if r["cost_nanos"] is not None]
    return {"requests": len(rows), "prompt": sum(r["prompt_tokens"] for r in rows),
            "completion": sum(r["completion_tokens"] for r in rows), "tokens": sum(r["total_tokens"] for r in rows),
            "cost": usd(sum(r["cost_nanos"] for r in priced)) if priced or not rows else "unpriced",
            "unpriced": len(rows) - len(priced)}


def table_rows(rows: list[dict], field: str, none: str = "(no user)") -> list[list[str]]:
    groups: dict = defaultdict(list)
    for row in rows:
        groups[row[field]].append(row)
    ordered = sorted(groups.items(), key=lambda g: (-figures(g[1])["tokens"], str(g[0])))
    return [[none if value is None else value, tokens(f["requests"]), "0",  # the seeded rows: none refused
             *(tokens(f[k]) for k in ("prompt", "completion", "tokens")), f["cost"], tokens(f["unpriced"])]
            for value, f in ((v, figures(rs)) for v, rs in ordered)]


def ledger(url: str, accounts: tuple[str, ...], since: datetime) -> list[dict]:
    return [r for account in accounts for r in off_loop(ledger_rows, url, account) if r["started_at"] >= since]


# -- the page ----------------------------------------------------------------------------------------
def shown_table(page, table_id: str) -> list[list[str]]:
    return page.eval_on_selector_all(f"#{table_id} tr:not(:first-child)",
                                     "rows => rows.map(r => [...r.cells].map(c => c.textContent))")


def shown_totals(page) -> dict:
    return page.eval_on_selector_all("[data-total]", "els => Object.fromEntries(els.map(e => [e.dataset.total, "
                                                     "e.textContent]))")


def refreshed(page, action) -> None:
    """Do `action` and wait until the page shows the refresh it started."""
    before = page.evaluate("document.body.dataset.generation || ''")
    action()
    page.wait_for_function("g => document.body.dataset.state === 'ready' && document.body.dataset.generation !== g",
                           arg=before)


def sign_in(page, url: str, key: str) -> None:
    page.goto(f"{url}/ui/")
    page.fill("#api-key", key)
    refreshed(page, lambda: page.click("#sign-in-form button[type=submit]"))


def test_the_dashboard_shows_the_ledgers_figures_per_day_model_key_and_user(page, dashboard):
    gateway, db, url = dashboard["gateway"], dashboard["db"], dashboard["url"]
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    sign_in(page, gateway.url, db.multi_key)

    assert page.text_content("#key-id") == dashboard["keys"]["acct-a acct-b"]
    options = page.eval_on_selector_all("#account option", "os => os.map(o => [o.value, o.textContent])")
    assert options == [["", "All 2 accounts"], ["acct-a", "acct-a"], ["acct-b", "acct-b"]]
    since = datetime.fromisoformat(page.input_value("#from") + "T00:00:00+00:00")
    recent = ledger(url, ("acct-a", "acct-b"), since)
    assert len(recent) == 5  # all but the 60-day-old row
    expected = figures(recent)
    assert shown_totals(page) == {"requests": tokens(expected["requests"]), "total_tokens": tokens(expected["tokens"]),
                                  "cost": expected["cost"], "unpriced_requests": tokens(expected["unpriced"]),
                                  "refused_requests": "0", "cache_hits": "0", "cache_saved": "$0.00"}
    assert shown_table(page, "by-outcome") == table_rows(recent, "outcome")
    assert shown_table(page, "by-model") == table_rows(recent, "model")
    assert shown_table(page, "by-key") == table_rows(recent, "key_id")
    assert shown_table(page, "by-user") == table_rows(recent, "end_user")
    assert page.text_content("#by-user") and page.locator("#by-user b").count() == 0  # "<b>carol</b>" as text

    # The chart: one bar per day of the period, each titled with its day's figures.
    bars = page.eval_on_selector_all("#chart rect.bar", "bs => bs.map(b => [b.dataset.day, b.textContent])")
    assert len(bars) == 30
    per_day: dict = defaultdict(list)
    for row in recent:
        per_day[row["started_at"].date().isoformat()].append(row)
    for day, title in bars:
        f = figures(per_day.get(day, []))
        assert title == f"{day}: {tokens(f['tokens'])} tokens, {f['cost']}"
    screenshot(page, "dashboard-all-accounts")

    # One account, then a period that reaches the old row.
    refreshed(page, lambda: page.select_option("#account", "acct-b"))
    only_b = ledger(url, ("acct-b",), since)
    assert shown_table(page, "by-model") == table_rows(only_b, "model")
    assert shown_totals(page)["cost"] == figures(only_b)["cost"]
    older = (dashboard["now"] - timedelta(days=70)).date()
    refreshed(page, lambda: (page.fill("#from", older.isoformat()), page.dispatch_event("#from", "change")))
    wider = ledger(url, ("acct-b",), datetime(older.year, older.month, older.day, tzinfo=UTC))
    assert len(wider) == 3 and shown_table(page, "by-user") == table_rows(wider, "end_user")
    assert shown_totals(page)["requests"] == "3"
    screenshot(page, "dashboard-one-account-wider")

    # Nothing but the gateway was asked for anything.
    assert requested and all(u.startswith(gateway.url + "/") for u in requested)


def test_the_key_stays_in_the_tab_only_and_a_bad_key_is_refused(page, dashboard):
    gateway, db = dashboard["gateway"], dashboard["db"]
    page.goto(f"{gateway.url}/ui/")
    page.fill("#api-key", "sk-gw-" + "x" * 43)
    page.click("#sign-in-form button[type=submit]")
    page.wait_for_selector("#sign-in-error:not([hidden])")
    assert page.text_content("#sign-in-error") == "That key is not valid."
    screenshot(page, "dashboard-bad-key")

    sign_in(page, gateway.url, db.key)
    assert page.evaluate("sessionStorage.getItem('gateway.api_key')") == db.key
    assert page.evaluate("localStorage.length") == 0 and page.context.cookies() == []
    assert page.eval_on_selector_all("#account option", "os => os.map(o => o.value)") == ["acct-a"]
    page.reload()  # the same tab: still signed in
    page.wait_for_function("() => document.body.dataset.state === 'ready'")
    other = page.context.browser.new_context().new_page()  # another tab's session: signed out
    other.goto(f"{gateway.url}/ui/")
    other.wait_for_function("() => document.body.dataset.state === 'signed-out'")
    assert other.is_visible("#sign-in") and not other.is_visible("#dashboard")
    other.context.close()
    page.click("#sign-out")
    assert page.evaluate("sessionStorage.length") == 0 and page.is_visible("#sign-in")


def test_the_files_come_from_the_gateway_with_a_policy_that_allows_nothing_else(dashboard):
    url = dashboard["gateway"].url
    with httpx.Client(base_url=url, verify=SHARED_TLS) as client:
        page = client.get("/ui/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "connect-src 'self'" in policy
        assert not re.search(r"https?://", page.text)  # no asset from another host
        assert client.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
        assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/"
        missing = client.get("/ui/nope.js")
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
        posted = client.post("/ui/")
        assert posted.status_code == 405 and posted.headers["allow"] == "GET, HEAD"
        head = client.head("/ui/style.css")
        assert head.status_code == 200 and head.content == b"" and int(head.headers["content-length"]) > 0
