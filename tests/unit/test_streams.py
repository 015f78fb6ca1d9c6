"""core/streams.py's Watch: one timer bounds every wait of a stream, with asyncio.timeout's
semantics (the vendor-facing timeouts through real HTTP are in tests/integration/test_faults.py); and
`all_of`, whose calls a failure abandons, as such, while its caller's cancellation is its own."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.streams import Watch, abandoned, all_of


def test_a_wait_that_ends_in_time_gives_its_value_and_a_later_wait_keeps_its_own_deadline():
    async def go() -> tuple[str, str]:
        loop = asyncio.get_running_loop()
        watch = Watch()
        first = await watch.wait(asyncio.sleep(0, "first"), watch.now() + 0.01)  # the alarm is set for this one
        later: asyncio.Future[str] = loop.create_future()
        loop.call_at(watch.now() + 0.05, later.set_result, "later")  # comes after the first wait's deadline
        try:
            return first, await watch.wait(later, watch.now() + 30)
        finally:
            watch.close()

    assert asyncio.run(go()) == ("first", "later")


def test_a_wait_past_its_deadline_is_a_timeout_error_and_leaves_the_task_uncancelled():
    async def go() -> int:
        watch = Watch()
        never = asyncio.get_running_loop().create_future()
        with pytest.raises(TimeoutError):
            await watch.wait(never, watch.now() + 0.01)
        watch.close()
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert asyncio.run(go()) == 0


def test_a_cancellation_from_outside_stays_a_cancellation():
    async def go() -> None:
        watch = Watch()
        never = asyncio.get_running_loop().create_future()
        waiting = asyncio.create_task(watch.wait(never, watch.now() + 30))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        watch.close()

    asyncio.run(go())


def test_the_deadline_counts_only_while_waiting():
    """Time spent between waits (the stream's consumer at work) is no wait's: an alarm that
    rings then does not cancel whatever the task is doing."""

    async def go() -> str:
        loop = asyncio.get_running_loop()
        watch = Watch()
        await watch.wait(asyncio.sleep(0), watch.now() + 0.01)
        await asyncio.sleep(0.05)  # not a wait of the watch: its alarm rings meanwhile
        soon: asyncio.Future[str] = loop.create_future()
        loop.call_soon(soon.set_result, "served")
        try:
            return await watch.wait(soon, watch.now() + 30)
        finally:
            watch.close()

    assert asyncio.run(go()) == "served"


def test_all_of_gives_every_result_in_order():
    async def after(delay: float, value: str) -> str:
        await asyncio.sleep(delay)
        return value

    assert asyncio.run(all_of([after(0.01, "a"), after(0, "b")])) == ["a", "b"]


def test_all_of_raises_the_first_failure_and_abandons_the_others_as_such():
    seen: list[bool] = []

    async def waits() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError as exc:
            seen.append(abandoned(exc))
            raise

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        asyncio.run(all_of([waits(), fails(), waits()]))
    assert seen == [True, True]


def test_all_of_cancelled_by_its_caller_cancels_its_calls_as_the_callers_own():
    seen: list[bool] = []
    started: list[asyncio.Event] = []

    async def waits(began: asyncio.Event) -> None:
        began.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError as exc:
            seen.append(abandoned(exc))
            raise

    async def go() -> None:
        started.extend(asyncio.Event() for _ in range(2))
        task = asyncio.ensure_future(all_of([waits(began) for began in started]))
        for began in started:
            await began.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert seen == [False, False]
