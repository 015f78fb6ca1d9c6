"""Merging concurrent async streams: the planner's fanned-out vendor calls, the local engine's
`n` generations."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, TypeVar

T = TypeVar("T")

_DONE = object()


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
    try:
        running = len(tasks)
        while running:
            number, item = await queue.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield number, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
