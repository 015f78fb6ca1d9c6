"""Stored responses (gateway/store/responses.py) on real SQLite and PostgreSQL: what is kept, who
sees it, how long, chains, pages, deletion and purge. The clock is the test's (`now`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from gateway.store import database
from gateway.store.responses import ChainTooLong, ItemNotFound, ResponseNotFound, ResponseStore
from gateway.store.tables import response_items, responses
from tests.support.provision import migrated_database

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
STORE = ResponseStore(retention=timedelta(days=30), max_chain=4, max_chain_bytes=1 << 20)


@pytest.fixture(scope="module")
def url(backend_kind):
    with migrated_database(backend_kind) as url:
        yield url


def run(url: str, work):
    """Run `work(connection)` in one write transaction on a fresh engine; its result."""
    async def go():
        engine = database.connect(url)
        try:
            async with database.writing(engine) as connection:
                return await work(connection)
        finally:
            await engine.dispose()
    return asyncio.run(go())


counter = iter(range(1_000_000))


def response(previous: str | None = None, *, text: str = "hi", store: bool = True, status: str = "completed") -> dict:
    rid = f"resp_test{next(counter):08d}"
    return {"id": rid, "object": "response", "created_at": int(T0.timestamp()), "status": status, "error": None,
            "incomplete_details": None, "instructions": "be brief", "model": "fake/m", "parallel_tool_calls": True,
            "previous_response_id": previous, "store": store, "tool_choice": "auto", "tools": [], "metadata": {},
            "usage": {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                      "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 5},
            "output": [{"type": "message", "id": f"msg_{rid}", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}]}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def save(url, account, resp, items, now=T0):
    return run(url, lambda c: STORE.save(c, account, resp, items, now))


def test_a_saved_response_is_read_back_whole_by_its_account(url):
    resp = response(text="Paris \ud800 \x00 é")
    assert save(url, "acct-a", resp, [user("capital?")])
    assert run(url, lambda c: STORE.get(c, "acct-a", resp["id"], T0)) == resp


def test_another_accounts_id_is_answered_as_an_unknown_one(url):
    resp = response()
    save(url, "acct-a", resp, [user("x")])
    for work in (lambda c: STORE.get(c, "acct-b", resp["id"], T0),
                 lambda c: STORE.delete(c, "acct-b", resp["id"], T0),
                 lambda c: STORE.input_items(c, "acct-b", resp["id"], T0),
                 lambda c: STORE.chain(c, "acct-b", resp["id"], T0)):
        with pytest.raises(ResponseNotFound) as foreign:
            run(url, work)
        with pytest.raises(ResponseNotFound) as unknown:
            run(url, lambda c: STORE.get(c, "acct-b", "resp_nothing", T0))
        assert str(foreign.value).replace(resp["id"], "ID") == str(unknown.value).replace("resp_nothing", "ID")
    assert run(url, lambda c: STORE.get(c, "acct-a", resp["id"], T0))["status"] == "completed"


def test_store_false_keeps_nothing(url):
    resp = response(store=False)
    assert not save(url, "acct-a", resp, [user("x")])
    count = run(url, lambda c: c.scalar(select(func.count()).select_from(responses)
                                        .where(responses.c.id == resp["id"])))
    assert count == 0
    with pytest.raises(ResponseNotFound):
        run(url, lambda c: STORE.chain(c, "acct-a", resp["id"], T0))


def test_deleting_removes_the_rows_and_a_second_delete_is_not_found(url):
    resp = response()
    save(url, "acct-a", resp, [user("x"), user("y")])
    assert run(url, lambda c: STORE.delete(c, "acct-a", resp["id"], T0)) == {
        "id": resp["id"], "object": "response", "deleted": True}
    left = run(url, lambda c: c.scalar(select(func.count()).select_from(response_items)
                                       .where(response_items.c.response_id == resp["id"])))
    assert left == 0
    with pytest.raises(ResponseNotFound):
        run(url, lambda c: STORE.delete(c, "acct-a", resp["id"], T0))


def test_the_chain_gives_each_responses_input_then_output_oldest_first_without_instructions(url):
    first = response(text="one")
    save(url, "acct-a", first, [user("a")])
    second = response(first["id"], text="two")
    save(url, "acct-a", second, [user("b")])
    items = run(url, lambda c: STORE.chain(c, "acct-a", second["id"], T0))
    said = [i["content"] if i["role"] == "user" else i["content"][0]["text"] for i in items]
    assert said == ["a", "one", "b", "two"]
    assert all(i["id"] for i in items) and "be brief" not in str(items)


def test_a_chain_through_a_deleted_or_foreign_response_is_not_found(url):
    first = response()
    save(url, "acct-a", first, [user("a")])
    second = response(first["id"])
    save(url, "acct-a", second, [user("b")])
    run(url, lambda c: STORE.delete(c, "acct-a", first["id"], T0))
    with pytest.raises(ResponseNotFound):
        run(url, lambda c: STORE.chain(c, "acct-a", second["id"], T0))
    foreign = response()
    save(url, "acct-b", foreign, [user("a")])
    mine = response(foreign["id"])
    save(url, "acct-a", mine, [user("b")])
    with pytest.raises(ResponseNotFound):
        run(url, lambda c: STORE.chain(c, "acct-a", mine["id"], T0))


def test_a_chain_is_bounded_in_responses_and_in_bytes(url):
    previous = None
    for _ in range(STORE.max_chain):
        resp = response(previous)
        save(url, "acct-a", resp, [user("x")])
        previous = resp["id"]
    assert len(run(url, lambda c: STORE.chain(c, "acct-a", previous, T0))) == 2 * STORE.max_chain
    longer = response(previous)
    save(url, "acct-a", longer, [user("x")])
    with pytest.raises(ChainTooLong) as too_long:
        run(url, lambda c: STORE.chain(c, "acct-a", longer["id"], T0))
    assert too_long.value.what == "responses"
    big = response(text="x" * (STORE.max_chain_bytes + 1))
    save(url, "acct-a", big, [user("x")])
    with pytest.raises(ChainTooLong) as too_big:
        run(url, lambda c: STORE.chain(c, "acct-a", big["id"], T0))
    assert too_big.value.what == "bytes"


def test_input_items_page_in_either_order_after_and_before_an_item(url):
    resp = response()
    given = [{"type": "message", "id": f"msg_{n}", "role": "user", "content": str(n)} for n in range(5)]
    save(url, "acct-a", resp, given)

    def page(**kw):
        return run(url, lambda c: STORE.input_items(c, "acct-a", resp["id"], T0, **kw)).wire()

    first = page(limit=2)
    assert [i["id"] for i in first["data"]] == ["msg_4", "msg_3"] and first["has_more"]
    assert (first["first_id"], first["last_id"]) == ("msg_4", "msg_3")
    assert [i["id"] for i in page(limit=2, after="msg_3")["data"]] == ["msg_2", "msg_1"]
    asc = page(order="asc", after="msg_1", before="msg_4")
    assert [i["id"] for i in asc["data"]] == ["msg_2", "msg_3"] and not asc["has_more"]
    assert page(order="asc", after="msg_4") == {"object": "list", "data": [], "first_id": None,
                                               "last_id": None, "has_more": False}
    with pytest.raises(ItemNotFound):
        page(after="msg_nope")


def test_items_without_an_id_are_given_one_and_a_message_its_type(url):
    resp = response()
    save(url, "acct-a", resp, [user("x"), {"type": "function_call_output", "call_id": "c1", "output": "4"}])
    data = run(url, lambda c: STORE.input_items(c, "acct-a", resp["id"], T0, order="asc")).data
    assert data[0]["type"] == "message" and data[0]["id"].startswith("msg_")
    assert data[1]["id"].startswith("fco_") and data[1]["call_id"] == "c1"


def test_a_response_past_its_retention_is_not_found_and_the_purge_removes_it(url):
    old, young = response(), response()
    save(url, "acct-a", old, [user("x")], now=T0 - timedelta(days=31))
    save(url, "acct-a", young, [user("x")], now=T0 - timedelta(days=29))
    with pytest.raises(ResponseNotFound):
        run(url, lambda c: STORE.get(c, "acct-a", old["id"], T0))
    assert run(url, lambda c: STORE.get(c, "acct-a", young["id"], T0))["id"] == young["id"]
    while run(url, lambda c: STORE.purge(c, T0, batch=1)) == 1:
        pass
    kept = run(url, _ids)
    assert old["id"] not in kept and young["id"] in kept
    orphans = run(url, lambda c: c.scalar(select(func.count()).select_from(response_items)
                                          .where(response_items.c.response_id == old["id"])))
    assert orphans == 0


async def _ids(connection) -> list[str]:
    return list((await connection.execute(select(responses.c.id))).scalars().all())


def test_saving_again_replaces_and_keeps_the_first_creation_time(url):
    resp = response(status="in_progress")
    save(url, "acct-a", resp, [user("x")], now=T0 - timedelta(days=29, hours=23))
    save(url, "acct-a", {**resp, "status": "completed"}, [user("x")], now=T0)
    with pytest.raises(ResponseNotFound):  # still dated by its first save: past retention a day later
        run(url, lambda c: STORE.get(c, "acct-a", resp["id"], T0 + timedelta(days=1)))
