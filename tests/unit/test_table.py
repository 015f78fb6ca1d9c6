"""gateway/limits/table.py: its copy of the limits table (`LimitsTable`), where a load returns only
once a read begun after it was called has been applied, the callers arriving during a read share
the next one, and a read that fails says so to each of them (the table's reads are the test's to
answer; nothing sleeps)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gateway.limits import table
from gateway.limits.rules import KEY, Limits, Subject
from gateway.limits.table import LimitsTable

NEW_KEY = Subject(KEY, "key_new")


class Reads:
    """The table's reads, each answered when the test says (`answer`), in the order they began."""

    def __init__(self) -> None:
        self.begun: list[asyncio.Future[dict[Subject, Limits]]] = []
        self.started = asyncio.Event()

    async def read_all(self, connection) -> dict[Subject, Limits]:
        answer: asyncio.Future[dict[Subject, Limits]] = asyncio.get_running_loop().create_future()
        self.begun.append(answer)
        self.started.set()
        return await answer

    async def next_begun(self, count: int) -> None:
        while len(self.begun) < count:
            self.started.clear()
            await self.started.wait()


class Engine:
    @contextlib.asynccontextmanager
    async def connect(self):
        yield None


@pytest.fixture
def reads(monkeypatch) -> Reads:
    reads = Reads()
    monkeypatch.setattr(table, "read_all", reads.read_all)
    return reads


async def settled() -> None:
    for _ in range(5):  # a few turns of the loop: whatever is ready runs
        await asyncio.sleep(0)


def test_a_load_waits_for_a_read_begun_after_it_not_one_under_way(reads):
    async def scenario():
        table = LimitsTable(Engine(), ttl=3600)
        first = asyncio.ensure_future(table.load())
        await reads.next_begun(1)
        second = asyncio.ensure_future(table.load())  # the read under way began before it
        await settled()
        assert len(reads.begun) == 1  # one read at a time: an older copy cannot land after a newer one
        reads.begun[0].set_result({})
        await settled()
        assert first.done() and not second.done()
        await reads.next_begun(2)
        reads.begun[1].set_result({NEW_KEY: Limits(rpm=2)})
        await second
        assert table.of(NEW_KEY) == Limits(rpm=2)

    asyncio.run(scenario())


def test_the_callers_arriving_during_a_read_share_the_next_one(reads):
    async def scenario():
        table = LimitsTable(Engine(), ttl=3600)
        first = asyncio.ensure_future(table.load())
        await reads.next_begun(1)
        burst = [asyncio.ensure_future(table.load()) for _ in range(20)]
        await settled()
        assert len(reads.begun) == 1
        reads.begun[0].set_result({})
        await first
        await reads.next_begun(2)
        reads.begun[1].set_result({NEW_KEY: Limits(concurrent=1)})
        await asyncio.gather(*burst)
        assert len(reads.begun) == 2 and table.of(NEW_KEY) == Limits(concurrent=1)

    asyncio.run(scenario())


def test_a_failed_read_fails_its_callers_and_the_next_load_reads_again(reads):
    async def scenario():
        table = LimitsTable(Engine(), ttl=3600, subjects={NEW_KEY: Limits(rpm=1)})
        waiting = [asyncio.ensure_future(table.load()) for _ in range(3)]
        await reads.next_begun(1)
        await settled()
        assert len(reads.begun) == 1
        reads.begun[0].set_exception(ConnectionError("database away"))
        for waiter in waiting:
            with pytest.raises(ConnectionError):
                await waiter
        assert table.of(NEW_KEY) == Limits(rpm=1)  # the last copy stays
        again = asyncio.ensure_future(table.load())
        await reads.next_begun(2)
        reads.begun[1].set_result({})
        await again
        assert table.of(NEW_KEY) is None

    asyncio.run(scenario())
