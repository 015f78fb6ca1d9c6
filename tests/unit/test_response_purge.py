"""The periodic purge of stored responses (store/response_purge.py) on a real SQLite database: what
is past its retention by the injected clock is removed, rows and items, and nothing else; a backlog
larger than a batch is removed whole."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from gateway.store import database, response_purge
from gateway.store.response_purge import ResponsePurge
from gateway.store.responses import ResponseStore
from gateway.store.tables import response_items, responses
from tests.support.provision import empty_database

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
STORE = ResponseStore(retention=timedelta(days=30))


def _response(response_id: str) -> dict:
    return {"id": response_id, "object": "response", "status": "completed", "store": True,
            "output": [{"type": "message", "id": f"msg_{response_id}", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "hi", "annotations": []}]}]}


def test_the_purge_removes_what_its_clock_says_expired(monkeypatch):
    monkeypatch.setattr(response_purge, "BATCH", 2)  # three old responses: more than one batch

    async def scenario() -> tuple[int, int, list[str], int]:
        with empty_database("sqlite") as url:
            engine = database.connect(url)
            try:
                await database.prepare(engine, lambda connection: asyncio.sleep(0))
                async with database.writing(engine) as connection:
                    for i, created in enumerate([T0, T0, T0, T0 + timedelta(days=20)]):
                        items = [{"type": "message", "role": "user", "content": "hello"}]
                        await STORE.save(connection, "acct-a", _response(f"resp_{i}"), items, created)
                now = [T0 + timedelta(days=29)]
                purge = ResponsePurge(engine, STORE, interval=3600, clock=lambda: now[0])
                early = await purge.run_once()
                now[0] = T0 + timedelta(days=31)
                removed = await purge.run_once()
                async with engine.connect() as connection:
                    left = (await connection.execute(select(responses.c.id))).scalars().all()
                    items = (await connection.execute(select(func.count()).select_from(response_items))).scalar()
                return early, removed, sorted(left), items
            finally:
                await engine.dispose()

    early, removed, left, items = asyncio.run(scenario())
    assert (early, removed, left, items) == (0, 3, ["resp_3"], 2)  # its input and its output
