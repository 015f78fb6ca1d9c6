"""The `gateway` command as an operator uses it (its usage reports are tested with the ledger, in
tests/integration/test_ledger.py). The commands run in-process through the console script's entry point; one
test runs the installed script itself."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time

import pytest
import redis

from gateway import cli
from gateway.limits.rules import ACCOUNT, Subject
from gateway.limits.table import set_limits
from gateway.store import database
from tests.support.cli import console_script, gateway_cli
from tests.support.provision import empty_database
from tests.support.redis_servers import redis_prefix, redis_url, remove_redis_keys


@pytest.fixture(scope="module")
def url():
    with empty_database("sqlite") as url:
        yield url


def test_accounts_are_created_once_and_listed(url):
    created = gateway_cli(url, "accounts", "create", "acme", "--name", "Acme, Inc.")
    assert created.returncode == 0 and created.stdout == "created account acme\n"
    duplicate = gateway_cli(url, "accounts", "create", "acme")
    assert duplicate.returncode == 1 and "already exists" in duplicate.stderr
    invalid = gateway_cli(url, "accounts", "create", "no spaces")
    assert invalid.returncode == 1 and "invalid account id" in invalid.stderr
    (listed,) = json.loads(gateway_cli(url, "accounts", "list", "--format", "json").stdout)
    assert listed["id"] == "acme" and listed["name"] == "Acme, Inc." and listed["created_at"].endswith("Z")
    as_csv = gateway_cli(url, "accounts", "list", "--format", "csv").stdout.splitlines()
    assert as_csv[0] == "id,name,created_at" and as_csv[1].startswith('acme,"Acme, Inc.",')


def test_a_new_key_is_shown_once_and_only_its_id_afterwards(url):
    gateway_cli(url, "accounts", "create", "beta")
    created = gateway_cli(url, "keys", "create", "--account", "beta", "--name", "ci bot")
    assert created.returncode == 0
    announcement, key = created.stdout.splitlines()
    key_id = announcement.split()[2]
    assert announcement == f"created key {key_id} for account(s) beta with scope(s) inference, usage"
    assert key.startswith("sk-gw-")
    assert "shown only this once" in created.stderr
    listed = gateway_cli(url, "keys", "list", "--account", "beta")
    assert key_id in listed.stdout and "ci bot" in listed.stdout and key not in listed.stdout
    assert key not in gateway_cli(url, "keys", "list", "--format", "json").stdout

    unknown = gateway_cli(url, "keys", "create", "--account", "beta", "--account", "nobody")
    assert unknown.returncode == 1 and "no such account: nobody" in unknown.stderr
    assert gateway_cli(url, "keys", "revoke", "key_0000").returncode == 1


def test_scopes_and_expiry_are_given_at_creation_and_listed(url):
    gateway_cli(url, "accounts", "create", "scoped")
    made = gateway_cli(url, "keys", "create", "--account", "scoped", "--scope", "admin", "--scope", "usage",
                       "--expires-at", "2099-01-01", "--format", "json")
    assert made.returncode == 0, made.stderr
    created = json.loads(made.stdout)
    assert created["scopes"] == ["usage", "admin"] and created["expires_at"] == "2099-01-01T00:00:00Z"
    (listed,) = json.loads(gateway_cli(url, "keys", "list", "--account", "scoped", "--format", "json").stdout)
    assert (listed["scopes"], listed["state"], listed["expires_at"]) == ("usage admin", "active", "2099-01-01T00:00:00Z")
    refused = gateway_cli(url, "keys", "create", "--account", "scoped", "--scope", "root")
    assert refused.returncode == 2 and "invalid choice: 'root'" in refused.stderr


def test_every_command_names_its_database_and_none_creates_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative URL, from another directory than the gateway's
    missing = gateway_cli("sqlite:///var/gateway.db", "accounts", "list")
    assert missing.returncode == 1 and f"no database at sqlite:///{tmp_path}/var/gateway.db" in missing.stderr
    assert "`gateway serve` or `gateway migrate` creates it" in missing.stderr and "Traceback" not in missing.stderr
    for command in (("keys", "create", "--account", "first"), ("usage",), ("audit",), ("accounts", "create", "first")):
        refused = gateway_cli("sqlite:///var/gateway.db", *command)
        assert refused.returncode == 1 and "no database at" in refused.stderr, command
    assert not (tmp_path / "var").exists()  # nothing was created on the way
    made = gateway_cli("sqlite:///var/gateway.db", "migrate")  # unless asked to
    assert made.returncode == 0 and "the database is ready" in made.stderr
    assert gateway_cli("sqlite:///var/gateway.db", "accounts", "create", "first").returncode == 0
    listed = gateway_cli("sqlite:///var/gateway.db", "accounts", "list", "--format", "json")
    assert [a["id"] for a in json.loads(listed.stdout)] == ["first"]  # no first-start account: an operator's own


def test_the_first_account_may_create_the_database_in_a_directory_that_exists(tmp_path, monkeypatch):
    """Provisioning from nothing, as the peer benchmark does it: `accounts create` on a SQLite file
    that is not there yet makes the database (said), and the rest follows on it."""
    monkeypatch.chdir(tmp_path)
    made = gateway_cli("sqlite:///gw.db", "accounts", "create", "bench")
    assert made.returncode == 0, made.stderr
    assert f"gateway: database sqlite:///{tmp_path}/gw.db (none was there: created)" in made.stderr
    key = json.loads(gateway_cli("sqlite:///gw.db", "keys", "create", "--account", "bench", "--format", "json").stdout)
    assert key["accounts"] == ["bench"] and key["key"].startswith("sk-gw-")


def test_the_audit_trail_has_every_change_the_cli_made(url):
    gateway_cli(url, "accounts", "create", "audited")
    key_id = json.loads(gateway_cli(url, "keys", "create", "--account", "audited", "--format", "json").stdout)["id"]
    listed = gateway_cli(url, "keys", "list")
    assert listed.stderr.startswith(f"gateway: database {url}")  # the URL is absolute already
    rotated = gateway_cli(url, "keys", "rotate", key_id, "--grace", "60", "--format", "json")
    assert rotated.returncode == 0 and f"key {key_id} works until " in rotated.stderr
    new_id = json.loads(rotated.stdout)["id"]
    assert gateway_cli(url, "keys", "revoke", key_id).returncode == 0
    trail = json.loads(gateway_cli(url, "audit", "--format", "json").stdout)
    mine = [(e["action"], e["object_id"]) for e in trail if e["object_id"] in ("audited", key_id)]
    assert mine == [("account.create", "audited"), ("key.create", key_id), ("key.rotate", key_id),
                    ("key.revoke", key_id)]
    assert next(e for e in trail if e["action"] == "key.rotate")["detail"]["replaced_by"] == new_id
    assert all(e["actor"].startswith("cli (") and e["address"] is None for e in trail)


def test_bad_arguments_and_settings_are_reported_not_raised(url):
    bad_time = gateway_cli(url, "usage", "--since", "last tuesday")
    assert bad_time.returncode == 2 and "not a date-time" in bad_time.stderr
    bad_url = gateway_cli("mysql://localhost/x", "accounts", "list")
    assert bad_url.returncode == 1 and "unsupported database 'mysql'" in bad_url.stderr
    assert "Traceback" not in bad_time.stderr + bad_url.stderr


def test_the_installed_console_script_administers_the_database(url):
    created = console_script(url, "accounts", "create", "gamma", "--name", "Gamma")
    assert created.returncode == 0 and created.stdout == "created account gamma\n", created.stderr


def test_limits_refuse_counts_beyond_exact_arithmetic_and_patterns_that_match_nothing(url):
    gateway_cli(url, "accounts", "create", "bounded")
    for flag in ("--rpm", "--tpm", "--concurrent", "--budget-tokens"):
        huge = gateway_cli(url, "limits", "set", "--account", "bounded", flag, "99999999999999999999999")
        assert huge.returncode == 2 and "at most 1,000,000,000,000,000" in huge.stderr.replace("from 1 to", "at most")
        assert "Traceback" not in huge.stderr and "sqlite" not in huge.stderr.lower()
    for patterns, says in ((("",), "an empty pattern matches no model"), (("fake/a*", " "), "empty pattern"),
                           (("gpt-4",), "models are written vendor/name")):
        refused = gateway_cli(url, "limits", "set", "--account", "bounded", "--models", *patterns)
        assert refused.returncode == 2 and says in refused.stderr
    assert "bounded" not in gateway_cli(url, "limits", "show", "--account", "bounded").stdout  # nothing was set
    largest = gateway_cli(url, "limits", "set", "--account", "bounded", "--tpm", str(10**15), "--models", "*")
    assert largest.returncode == 0, largest.stderr
    (row,) = [r for r in json.loads(gateway_cli(url, "limits", "show", "--account", "bounded", "--format",
                                                "json").stdout) if r["limit"] == "tpm"]
    assert (row["value"], row["used"], row["remaining"]) == (10**15, 0, 10**15)


def test_limits_show_never_reads_a_bucket_fuller_than_its_limit(url):
    """A TPM set before the bound (2^63 - 1) whose Redis bucket reads back as the double 2^63."""
    client = redis.Redis.from_url(redis_url())
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"no Redis at {redis_url()}: {exc}")
    gateway_cli(url, "accounts", "create", "huge")

    async def set_huge() -> None:
        engine = database.connect(url)
        try:
            async with database.writing(engine) as connection:
                await set_limits(connection, Subject(ACCOUNT, "huge"), {"tpm": 2**63 - 1})
        finally:
            await engine.dispose()

    asyncio.run(set_huge())
    prefix = redis_prefix()
    try:
        client.hset(f"{prefix}account:huge:rate", mapping={"tl": repr(float(2**63 - 1)), "tt": repr(time.time())})
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = cli.main(["limits", "show", "--account", "huge", "--format", "json"],
                            env={"GATEWAY_DATABASE_URL": url, "GATEWAY_REDIS_URL": redis_url(),
                                 "GATEWAY_REDIS_PREFIX": prefix})
        (row,) = json.loads(out.getvalue())
        assert code == 0 and row["source"] == "redis"
        assert (row["used"], row["remaining"]) == (0, 2**63 - 1)
    finally:
        remove_redis_keys(prefix)
        client.close()


def test_a_key_is_made_with_its_limits(url):
    gateway_cli(url, "accounts", "create", "born-limited")
    made = gateway_cli(url, "keys", "create", "--account", "born-limited", "--rpm", "7", "--budget-usd", "2.5",
                       "--period", "day", "--models", "fake/*", "--format", "json")
    assert made.returncode == 0, made.stderr
    key_id = json.loads(made.stdout)["id"]
    shown = json.loads(gateway_cli(url, "limits", "show", "--key", key_id, "--format", "json").stdout)
    assert {row["limit"]: row["value"] for row in shown} == {"rpm": 7, "budget_usd": "$2.50 per day", "models": "fake/*"}
    (line,) = [e for e in json.loads(gateway_cli(url, "audit", "--format", "json").stdout) if e["object_id"] == key_id]
    assert line["action"] == "key.create" and line["detail"]["limits"]["rpm"] == 7
    refused = gateway_cli(url, "keys", "create", "--account", "born-limited", "--period", "day")
    assert refused.returncode == 1 and "period of a budget" in refused.stderr  # and no key was made
    assert len(json.loads(gateway_cli(url, "keys", "list", "--account", "born-limited", "--format", "json").stdout)) == 1
