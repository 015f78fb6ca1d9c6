"""gateway/admin.py, the administration service, in-process on a SQLite file: each change is
one transaction with its audit line (a failed one leaves neither), rotation carries a key's limits
over and keeps the old key until its grace ends, and limits clear with None."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from gateway import admin
from gateway.limits import table
from gateway.limits.rules import ACCOUNT, KEY, Subject
from gateway.store import accounts, database
from gateway.store.accounts import AccountsError, Conflict, UnknownObject
from gateway.store.prices import Prices
from gateway.store.stored_prices import read
from gateway.store.tables import api_keys, audit_log
from gateway.store.tables import limits as limits_table
from tests.support.provision import empty_database

ACTOR = admin.Actor.key("key_admin", "platform team", "192.0.2.7")


def run(work: Callable[..., Awaitable[None]]) -> None:
    async def prepared(url: str) -> None:
        engine = database.connect(url)
        try:
            await database.prepare(engine, lambda connection: asyncio.sleep(0))
            await admin.create_account(engine, ACTOR, "acct", "Acct")
            await work(engine)
        finally:
            await engine.dispose()

    with empty_database("sqlite") as url:
        asyncio.run(prepared(url))


async def count(engine, table) -> int:
    async with engine.connect() as connection:
        return await connection.scalar(select(func.count()).select_from(table))


def test_a_key_its_allow_list_and_its_audit_line_are_made_together():
    async def work(engine):
        new = await admin.create_key(engine, ACTOR, ["acct"], "svc", ["inference"], None, ["fake/*"])
        view = await admin.get_key(engine, new.info.id)
        assert (view.info.scopes, view.models) == (("inference",), ("fake/*",))
        (*_, entry) = await admin.audit(engine)
        assert (entry.action, entry.object_id, entry.actor, entry.address) == (
            "key.create", new.info.id, "key key_admin (platform team)", "192.0.2.7")
        assert entry.detail["models"] == ["fake/*"] and new.key not in str(entry.detail)

    run(work)


def test_a_creation_that_fails_halfway_leaves_no_key_no_limit_and_no_audit_line(monkeypatch):
    async def work(engine):
        before = [await count(engine, rows) for rows in (api_keys, limits_table, audit_log)]

        async def broken(connection, subject, values):
            raise RuntimeError("the database went away after the key was written")

        monkeypatch.setattr(table, "set_limits", broken)
        with pytest.raises(RuntimeError):
            await admin.create_key(engine, ACTOR, ["acct"], "svc", ["inference"], None, ["fake/*"])
        with pytest.raises(UnknownObject, match="no such account: nobody"):
            await admin.create_key(engine, ACTOR, ["acct", "nobody"], "svc")
        assert [await count(engine, rows) for rows in (api_keys, limits_table, audit_log)] == before

    run(work)


def test_bad_values_are_refused_naming_their_field():
    async def work(engine):
        refusals = [
            (admin.create_key(engine, ACTOR, ["acct"], "x", ["root"]), "scopes"),
            (admin.create_key(engine, ACTOR, ["acct"], "x", [], None), "scopes"),
            (admin.create_key(engine, ACTOR, ["acct"], "x", ["usage"], datetime.now(UTC) - timedelta(seconds=1)),
             "expires_at"),
            (admin.create_key(engine, ACTOR, ["acct"], "x", ["usage"], None, ["gpt4"]), "models"),
            (admin.set_limits(engine, ACTOR, Subject(ACCOUNT, "acct"), {"rpm": 0}), "rpm"),
            (admin.set_limits(engine, ACTOR, Subject(ACCOUNT, "acct"), {"budget_period": "week"}), "period"),
            (admin.set_limits(engine, ACTOR, Subject(ACCOUNT, "acct"), {"budget_period": "day"}), "budget_period"),
            (admin.set_price(engine, ACTOR, "no-vendor", {"input": 1, "output": 1}), "model"),
            (admin.set_price(engine, ACTOR, "v/m", {"input": 1}), "output"),
        ]
        for refusal, field in refusals:
            with pytest.raises(AccountsError) as caught:
                await refusal
            assert caught.value.field == field, caught.value
        assert [e.action for e in await admin.audit(engine)] == ["account.create"]

    run(work)


def test_a_rotation_keeps_the_old_key_for_its_grace_and_carries_the_limits_over():
    async def work(engine):
        old = await admin.create_key(engine, ACTOR, ["acct"], "svc", ["inference", "usage"], None, ["fake/*"])
        await admin.set_limits(engine, ACTOR, Subject(KEY, old.info.id), {"budget_tokens": 500, "rpm": 9})
        before = datetime.now(UTC)
        replaced, new = await admin.rotate_key(engine, ACTOR, old.info.id, 600)
        assert replaced.replaced_by == new.info.id and replaced.state(before) == "rotating"
        assert before + timedelta(seconds=600) <= replaced.revoked_at <= datetime.now(UTC) + timedelta(seconds=600)
        assert replaced.state(replaced.revoked_at) == "revoked"
        assert (new.info.accounts, new.info.scopes, new.info.name) == (("acct",), ("inference", "usage"), "svc")
        carried = (await admin.limits_of(engine, Subject(KEY, new.info.id)))[Subject(KEY, new.info.id)]
        assert (carried.rpm, carried.models, [b.limit for b in carried.budgets]) == (9, ("fake/*",), [500])
        with pytest.raises(Conflict, match="rotating"):
            await admin.rotate_key(engine, ACTOR, old.info.id, 0)
        assert (await admin.revoke_key(engine, ACTOR, old.info.id)).state(datetime.now(UTC)) == "revoked"
        with pytest.raises(Conflict, match="already revoked"):
            await admin.revoke_key(engine, ACTOR, old.info.id)
        with pytest.raises(UnknownObject):
            await admin.rotate_key(engine, ACTOR, "key_nope", 0)

    run(work)


def test_limits_are_set_and_cleared_with_none():
    async def work(engine):
        subject = Subject(ACCOUNT, "acct")
        both = await admin.set_limits(engine, ACTOR, subject, {"rpm": 5, "budget_tokens": 100, "budget_period": "day"})
        assert both.rpm == 5 and [(b.limit, b.period) for b in both.budgets] == [(100, "day")]
        left = await admin.set_limits(engine, ACTOR, subject, {"rpm": None})
        assert left.rpm is None and [b.limit for b in left.budgets] == [100]
        assert await admin.set_limits(engine, ACTOR, subject, {"budget_tokens": None}) is None
        assert await admin.limits_of(engine, subject) == {}
        with pytest.raises(UnknownObject, match="no such account: 'nobody'"):
            await admin.limits_of(engine, Subject(ACCOUNT, "nobody"))

    run(work)


def test_a_stored_price_applies_from_when_it_was_set():
    async def work(engine):
        prices = Prices({})
        assert prices.cost_nanos("v/m", 1000, 1000) is None
        set_at = datetime.now(UTC)
        await admin.set_price(engine, ACTOR, "v/m", {"input": 1, "output": 2, "cached_input": None})
        async with engine.connect() as connection:
            prices.use_stored(await read(connection))
        # $1 and $2 per 1M tokens: 1,000 and 2,000 nano-dollars a token
        assert prices.cost_nanos("v/m", 1000, 1000) == 3_000_000
        assert prices.cost_nanos("v/m", 1000, 1000, at=set_at - timedelta(seconds=1)) is None  # started before
        (*_, entry) = await admin.audit(engine, since=set_at)
        assert (entry.action, entry.object_id, entry.detail["input"]) == ("price.set", "v/m", "1")

    run(work)


def test_the_key_serve_prints_on_a_first_start_is_never_an_admin_key():
    async def first_start(url: str) -> None:
        engine = database.connect(url)
        try:
            first = await database.prepare(engine, accounts.bootstrap)
            assert first.info.scopes == ("inference", "usage")
        finally:
            await engine.dispose()

    with empty_database("sqlite") as url:
        asyncio.run(first_start(url))
