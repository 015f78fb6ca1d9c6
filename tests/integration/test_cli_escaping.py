"""What the `gateway` command prints cannot drive the operator's terminal: names others chose (an
account's, a key's, so the audit trail's actor, and the `user` any inference key sends with a
request) full of escape sequences are shown escaped by every listing in every format, run as the
installed console script in its own process, as an operator runs it."""

from __future__ import annotations

import csv
import io
import json
import re

import httpx
import pytest

from tests.support.cli import console_script
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import empty_database, run_cli, wait_for_rows

# Retitle the window (OSC ... BEL), clear the screen (CSI 2J), go back to the line's start and one
# character back, a CSI as one C1 character, DEL, a right-to-left override, a line of its own.
HOSTILE = "ops\x1b]0;pwned\x07\x1b[2J\r\x08\x9b31m\x7f\u202enaeb\nforged line"
# Everything a terminal obeys rather than shows, but the newlines that end the lines printed.
OBEYED = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
SHOWN = r"ops\x1b]0;pwned\x07\x1b[2J\r\x08\x9b31m\x7f\u202enaeb\nforged line"  # HOSTILE, as a table spells it


@pytest.fixture(scope="module")
def hostile(upstream):
    """A database where a hostile name is everywhere a listing shows text: an account's name (made
    with the CLI), a key's name (over HTTP), the audit's actor (that key made a change), a pattern
    of an allow-list and a request's `user`."""
    with empty_database("sqlite") as url:
        run_cli(url, "accounts", "create", "ops", "--name", HOSTILE)
        admin_key = json.loads(run_cli(url, "keys", "create", "--account", "ops", "--scope", "admin", "--scope",
                                       "inference", "--format", "json"))["key"]
        with GatewayProcess(gateway_env(upstream.url, url)) as gateway, httpx.Client(
                base_url=gateway.url, headers={"x-api-key": admin_key}, verify=SHARED_TLS, timeout=30) as api:
            made = api.post("/v5/admin/keys", json={"name": HOSTILE, "accounts": ["ops"], "scopes": ["admin"]})
            assert made.status_code == 201, made.text
            hostile_key = made.json()["key"]
            changed = httpx.put(f"{gateway.url}/v5/admin/limits/accounts/ops", verify=SHARED_TLS,
                                json={"rpm": 100, "models": ["fake/*", f"fake/{HOSTILE}"]},
                                headers={"x-api-key": hostile_key})  # the audit's actor: "key key_… (HOSTILE)"
            assert changed.status_code == 200, changed.text
            answered = api.post("/v5/completions", json={"model": "fake/m", "prompt": "x", "max_tokens": 2,
                                                          "user": HOSTILE})
            assert answered.status_code == 200, answered.text
            wait_for_rows(url, "ops", 1)
        yield url


LISTINGS = [("accounts", "list"), ("keys", "list"), ("audit",), ("usage", "--group-by", "user,key")]
RUNS = [(listing, fmt) for listing in LISTINGS for fmt in ("table", "csv", "json")] + [
    (("limits", "show"), fmt) for fmt in ("table", "json")]


@pytest.mark.parametrize(("listing", "fmt"), RUNS, ids=[f"{listing[0]}-{fmt}" for listing, fmt in RUNS])
def test_every_listing_shows_hostile_names_escaped(hostile, listing, fmt):
    shown = console_script(hostile, *listing, "--format", fmt)
    assert shown.returncode == 0, shown.stderr
    assert not OBEYED.findall(shown.stdout + shown.stderr), (shown.stdout + shown.stderr)
    if fmt == "json":  # exact: JSON spells every such character as \u00XX
        assert any(HOSTILE in text for text in strings(json.loads(shown.stdout)))
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(shown.stdout)))
        assert any(SHOWN in cell for row in rows[1:] for cell in row) and len(rows) == shown.stdout.count("\n")
    else:
        lines = shown.stdout.splitlines()
        assert any(SHOWN in line for line in lines)  # the name in full, on one line
        assert not any(line.startswith("forged line") for line in lines)


def strings(value) -> list[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        return [value]
    inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return [text for item in inner for text in strings(item)]


def test_an_error_naming_a_hostile_value_is_escaped(hostile):
    refused = console_script(hostile, "keys", "create", "--account", "x\x1b]0;pwned\x07\x9b2J")
    assert refused.returncode == 1 and "no such account: x\\x1b]0;pwned\\x07\\x9b2J" in refused.stderr
    assert not OBEYED.findall(refused.stdout + refused.stderr), refused.stderr
    bad_argument = console_script(hostile, "usage", "--since", "\x1b]0;pwned\x07\u202e")
    assert bad_argument.returncode == 2 and not OBEYED.findall(bad_argument.stderr), bad_argument.stderr
