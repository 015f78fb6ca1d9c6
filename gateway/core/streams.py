"""Running concurrent vendor calls (the planner's fanned-out calls, the local engine's `n`
generations): their answers together (`all_of`) or their streams merged (`merged`), and bounding a
stream's waits with one timer (`Watch`).

When one of the calls fails, the others are cancelled with the message ABANDONED: the gateway gave
up on them, not their caller, so the vendor layer does not hold a call it was waiting for against
its deployment (a call its client gave up on, unanswered, is that deployment's failure:
vendors/transport/http.py). Without it, one request fanned out 50 ways and refused by the vendor (a client's
mistake) would count dozens of failures and eject every healthy deployment."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import aclosing
from typing import Any, TypeVar

T = TypeVar("T")

_DONE = object()
# The message of a cancellation by the gateway itself, because a sibling call failed (`abandoned`).
ABANDONED = "abandoned: another call of the request failed"


def abandoned(cancellation: BaseException) -> bool:
    """Whether a cancellation came from `all_of` or `merged` giving up on a call, not its caller."""
    return ABANDONED in getattr(cancellation, "args", ())


async def all_of(calls: list[Awaitable[T]]) -> list[T]:
    """The results of `calls` run concurrently, in their order. The first to fail (in their
    order, among those that failed together) has its exception raised once the others are
    cancelled as ABANDONED; a cancellation of the caller cancels them all, as its own."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    failed = next((t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None), None)
    if failed is None:
        return [task.result() for task in tasks]
    for task in tasks:
        task.cancel(ABANDONED)
    await asyncio.gather(*tasks, return_exceptions=True)
    raise failed.exception()  # type: ignore[misc]


async def merged(streams: list[AsyncIterator[T]], buffered: int = 0) -> AsyncIterator[tuple[int, T]]:
    """The items of several streams as they come, each with its stream's number. A failing
    stream's exception is raised here; closing the merged stream (or a failure) closes every
    stream. `buffered` bounds the items waiting (0: unbounded), so a slow consumer slows the
    streams down."""
    if len(streams) == 1:  # the usual case: no task and no queue hop for every item
        async with aclosing(streams[0]) as only:  # type: ignore[type-var]
            async for item in only:
                yield 0, item
        return
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue(buffered)

    async def pump(number: int, stream: AsyncIterator[T]) -> None:
        try:
            async with aclosing(stream):  # type: ignore[type-var]
                async for item in stream:
                    await queue.put((number, item))
            await queue.put((number, _DONE))
        except Exception as exc:  # handed to the consumer, which stops every stream
            await queue.put((number, exc))

    tasks = [asyncio.create_task(pump(number, stream)) for number, stream in enumerate(streams)]
    why = None  # the consumer's leaving (closing, or cancelled): the calls are given up as its own
    try:
        running = len(tasks)
        while running:
            number, item = await queue.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, Exception):
                why = ABANDONED
                raise item
            else:
                yield number, item
    finally:
        for task in tasks:
            task.cancel(why)
        await asyncio.gather(*tasks, return_exceptions=True)


class Watch:
    """Deadlines for the waits of one stream (its vendor reads, its writes to the client), kept
    by one timer for the whole stream instead of one per wait: a stream waits once for every
    piece it relays, and an `asyncio.timeout` per wait is a timer scheduled and cancelled each
    time. The timer rings at the earliest deadline it may have to enforce; a wait that made
    progress in between only moves the deadline, and the timer, ringing early, sets itself again.

    `wait(awaitable, deadline)` awaits with TimeoutError at `deadline` (loop time), with
    `asyncio.timeout`'s semantics: the waiting task is cancelled, and the cancellation becomes
    TimeoutError unless someone else cancelled it too. A wait never spans a `yield` of its
    caller, so the cancellation always lands in the wait it is meant for. `close()` ends it.
    """

    __slots__ = ("_loop", "_alarm", "_task", "_deadline", "_cancelling", "_expired")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._alarm: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[Any] | None = None  # the task waiting now; None between waits
        self._deadline = 0.0  # of the wait under way
        self._cancelling = 0  # the task's cancellation requests when its wait began
        self._expired = False

    def now(self) -> float:
        return self._loop.time()

    async def wait(self, awaitable: Awaitable[T], deadline: float) -> T:
        task = asyncio.current_task()
        assert task is not None
        self._task, self._deadline, self._cancelling, self._expired = task, deadline, task.cancelling(), False
        alarm = self._alarm
        if alarm is None or alarm.when() > deadline:
            if alarm is not None:
                alarm.cancel()
            self._alarm = self._loop.call_at(deadline, self._ring)
        try:
            return await awaitable
        except asyncio.CancelledError:
            if self._expired and task.uncancel() <= self._cancelling:
                raise TimeoutError from None
            raise
        finally:
            self._task = None

    def close(self) -> None:
        if self._alarm is not None:
            self._alarm.cancel()
            self._alarm = None

    def _ring(self) -> None:
        self._alarm = None
        task = self._task
        if task is None:
            return  # between waits: the next one sets the alarm again
        if self._loop.time() < self._deadline:
            self._alarm = self._loop.call_at(self._deadline, self._ring)
            return
        self._expired = True
        task.cancel()
