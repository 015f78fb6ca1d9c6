"""The ledger's writer in this process on a real database: a flood of refused requests is stored
as a row per batch, not a row each, and the usage report still counts every one."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.endpoint import Endpoint
from gateway.store import database, usage
from gateway.store.ledger import Ledger
from tests.support.provision import empty_database, ledger_rows, postgres_unavailable


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_refused_requests_alike_share_a_row_and_every_one_is_counted(kind):
    if kind == "postgresql" and (reason := postgres_unavailable()):
        pytest.skip(reason)

    async def flood(url: str) -> list[dict]:
        engine = database.connect(url)
        try:
            await database.prepare(engine, lambda connection: asyncio.sleep(0))
            ledger = Ledger(engine, max_pending=1000)
            ledger.start()
            for i in range(180):  # before the writer runs: alike, they wait as one row
                ledger.meter(request_id=f"cmpl-{i}", account_id="acct", key_id="key_1").refused(
                    "fake/m", streamed=False, end_user=None, endpoint=Endpoint.COMPLETIONS)
            ledger.meter(request_id="cmpl-chat", account_id="acct", key_id="key_1").refused(
                "fake/m", streamed=False, end_user=None, endpoint=Endpoint.CHAT)
            await ledger.drained()
            ledger.meter(request_id="cmpl-later", account_id="acct", key_id="key_1").refused(
                "fake/m", streamed=False, end_user=None, endpoint=Endpoint.COMPLETIONS)  # the rows taken are written as they were
            await ledger.close()
            async with engine.connect() as connection:  # from the ledger, and from the rollups
                return [await usage.report(connection, accounts=["acct"], group_by=by) for by in (("endpoint",), ("model",))]
        finally:
            await engine.dispose()

    with empty_database(kind) as url:
        lines, per_model = asyncio.run(flood(url))
        rows = ledger_rows(url, "acct")
    assert sorted((row["endpoint"], row["refusals"]) for row in rows) == [
        ("chat", 1), ("completions", 1), ("completions", 180)]
    assert {line["endpoint"]: (line["refused_requests"], line["requests"]) for line in lines} == {
        "chat": (1, 0), "completions": (181, 0)}
    assert [(line["model"], line["refused_requests"]) for line in per_model] == [("fake/m", 182)]
