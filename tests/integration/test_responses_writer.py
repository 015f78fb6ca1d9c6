"""The stored responses' writer (gateway/store/response_writer.py) on real SQLite and PostgreSQL:
a kept response is visible among the pending ones at once, to its account only; a read that needs
its rows awaits its commit (the event, no sleep) and then finds it; `stored` returns once it is
committed, with no timer between commits; a batch is committed whole; `store: false` keeps nothing;
with the database down, `stored` gives up after its bound (logged) and the response is committed
once the database is back; where no other process reads the database, `stored` does not wait;
shutdown writes what is pending; what waits is bounded."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from gateway.store import database
from gateway.store.response_writer import ResponseWriter
from gateway.store.responses import ResponseNotFound, ResponseStore
from tests.support.provision import migrated_database, postgres_down, writes_blocked

T0 = datetime.now(UTC)  # the store's retention is judged against it: a recent time
STORE = ResponseStore(retention=timedelta(days=30))


@pytest.fixture(scope="module")
def url(backend_kind):
    with migrated_database(backend_kind) as url:
        yield url


def _response(response_id: str, **fields) -> dict:
    return {"id": response_id, "object": "response", "status": "completed", "store": True,
            "previous_response_id": None,
            "output": [{"type": "message", "id": f"msg_{response_id}", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "hi", "annotations": []}]}], **fields}


def _with_writer(url: str, scenario, shared: bool = True):
    async def go():
        engine = database.connect(url)
        writer = ResponseWriter(engine, STORE, shared=shared)
        writer.start()
        try:
            return await scenario(engine, writer)
        finally:
            await writer.close()
            await engine.dispose()
    return asyncio.run(go())


def test_a_kept_response_is_pending_for_its_account_then_committed(url):
    async def scenario(engine, writer):
        resp = _response("resp_w1")
        writer.keep("acct-a", resp, [{"role": "user", "content": "hello"}], T0)
        seen = (writer.pending("acct-a", "resp_w1"), writer.pending("acct-b", "resp_w1"))
        await writer.flushed("acct-a", "resp_w1")
        async with engine.connect() as connection:
            stored = await STORE.get(connection, "acct-a", "resp_w1", T0)
            page = await STORE.input_items(connection, "acct-a", "resp_w1", T0)
            chain = await STORE.chain(connection, "acct-a", "resp_w1", T0)
            with pytest.raises(ResponseNotFound):
                await STORE.get(connection, "acct-b", "resp_w1", T0)
        return seen, stored, page, chain, writer.pending("acct-a", "resp_w1")

    (mine, foreign), stored, page, chain, after = _with_writer(url, scenario)
    assert mine["id"] == "resp_w1" and foreign is None
    assert stored["output"] == _response("resp_w1")["output"]
    assert [item["content"] for item in page.data] == ["hello"]
    assert [item.get("role") for item in chain] == ["user", "assistant"]
    assert after is None  # committed: no longer held in memory


def test_stored_returns_once_committed_and_a_replaced_note_keeps_its_event(url):
    async def scenario(engine, writer):
        first = writer.keep("acct-a", _response("resp_s1", output=[]), [], T0)
        again = writer.keep("acct-a", _response("resp_s1"), [], T0)  # replaces it before its commit
        await writer.stored(first)  # the replaced note's event is the replacement's
        await writer.stored(again)
        async with engine.connect() as connection:  # no flushed(): stored() alone made it durable
            return await STORE.get(connection, "acct-a", "resp_s1", T0), writer.pending("acct-a", "resp_s1")

    stored, held = _with_writer(url, scenario)
    assert stored["output"] == _response("resp_s1")["output"] and held is None
    assert _with_writer(url, lambda engine, writer: writer.stored(writer.keep("acct-a", _response("resp_s2",
                                                                           store=False), [], T0))) is None


def test_with_the_database_down_stored_gives_up_logged_and_commits_once_it_is_back(url, backend_kind, caplog):
    outage = writes_blocked if backend_kind == "sqlite" else postgres_down

    async def scenario(engine, writer):
        writer.COMMIT_WAIT = 0.2  # the bound under test is "it returns", not how long it took
        loop, down = asyncio.get_running_loop(), outage(url)
        with ThreadPoolExecutor(1) as thread:  # the outage's own blocking calls, in one thread (SQLite's rule)
            await loop.run_in_executor(thread, down.__enter__)
            try:
                noted = writer.keep("acct-a", _response("resp_down"), [], T0)
                await writer.stored(noted)
                during = (noted.committed.is_set(), writer.pending("acct-a", "resp_down") is not None)
            finally:
                await loop.run_in_executor(thread, down.__exit__, None, None, None)
        await writer.flushed("acct-a", "resp_down")  # the writer's retry, once the database is back
        async with engine.connect() as connection:
            return during, await STORE.get(connection, "acct-a", "resp_down", T0)

    (committed, pending), stored = _with_writer(url, scenario)
    assert not committed and pending and stored["id"] == "resp_down"
    assert "response resp_down answered before it was stored" in caplog.text


def test_where_no_other_process_reads_the_database_an_answer_does_not_wait_for_its_commit(url, backend_kind,
                                                                                         caplog):
    if backend_kind != "sqlite":
        pytest.skip("one worker on SQLite is the only database no other process reads")

    async def scenario(engine, writer):
        writer.COMMIT_WAIT = 3600  # were it waited for, the commit could not come: the database is blocked
        loop, down = asyncio.get_running_loop(), writes_blocked(url)
        with ThreadPoolExecutor(1) as thread:
            await loop.run_in_executor(thread, down.__enter__)
            try:
                noted = writer.keep("acct-a", _response("resp_alone"), [], T0)
                await asyncio.wait_for(writer.stored(noted), 60)  # (a safety net, not the bound under test)
                during = (noted.committed.is_set(), writer.pending("acct-a", "resp_alone") is not None)
            finally:
                await loop.run_in_executor(thread, down.__exit__, None, None, None)
        await writer.flushed("acct-a", "resp_alone")
        async with engine.connect() as connection:
            return during, await STORE.get(connection, "acct-a", "resp_alone", T0)

    (committed, pending), stored = _with_writer(url, scenario, shared=False)
    assert not committed and pending and stored["id"] == "resp_alone"  # answered at once, found, then kept
    assert "answered before it was stored" not in caplog.text  # not a failure: nobody else could look


def test_a_paced_writer_commits_at_once_when_a_read_here_needs_the_rows(url, backend_kind):
    if backend_kind != "sqlite":
        pytest.skip("one worker on SQLite is the only database no other process reads")

    async def scenario(engine, writer):
        writer.COMMIT_INTERVAL = 3600  # paced: the next commit would be an hour away but for the read
        await writer.flushed("acct-a", writer.keep("acct-a", _response("resp_p1"), [], T0).response["id"])
        writer.keep("acct-a", _response("resp_p2"), [], T0)  # noted while the writer paces
        await asyncio.wait_for(writer.flushed("acct-a", "resp_p2"), 60)  # (a safety net, not the bound)
        async with engine.connect() as connection:
            return (await STORE.get(connection, "acct-a", "resp_p2", T0))["id"]

    assert _with_writer(url, scenario, shared=False) == "resp_p2"


def test_many_responses_commit_in_one_batch_and_store_false_keeps_nothing(url):
    async def scenario(engine, writer):
        for i in range(40):
            writer.keep("acct-a", _response(f"resp_b{i}"), [{"role": "user", "content": str(i)}], T0)
        writer.keep("acct-a", _response("resp_not", store=False), [], T0)
        await writer.flushed("acct-a", "resp_b39")
        async with engine.connect() as connection:
            found = [(await STORE.get(connection, "acct-a", f"resp_b{i}", T0))["id"] for i in range(40)]
            with pytest.raises(ResponseNotFound):
                await STORE.get(connection, "acct-a", "resp_not", T0)
        return found, writer.pending("acct-a", "resp_not")

    found, not_kept = _with_writer(url, scenario)
    assert found == [f"resp_b{i}" for i in range(40)] and not_kept is None


def test_shutdown_writes_what_is_pending(url):
    async def scenario(engine, writer):
        writer.keep("acct-a", _response("resp_last"), [], T0)
        await writer.close()  # before its writer had its turn
        async with engine.connect() as connection:
            return await STORE.get(connection, "acct-a", "resp_last", T0)

    assert _with_writer(url, scenario)["id"] == "resp_last"


def test_what_waits_for_the_database_is_bounded(url, caplog):
    async def scenario(engine, writer):
        writer.MAX_PENDING = 2
        for i in range(3):
            writer.keep("acct-a", _response(f"resp_m{i}"), [], T0)
        return [writer.pending("acct-a", f"resp_m{i}") is not None for i in range(3)]

    assert _with_writer(url, scenario) == [True, True, False]
    assert "resp_m2 not stored" in caplog.text
