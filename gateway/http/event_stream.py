"""Writing our server-sent events.

A stream is `data: {chunk}` events, then `event: done` + `data: [DONE]`. The `done` event name is
deliberate: scale-gp-beta 0.7.0 JSON-decodes every event that has no `event:` line, so a bare
`data: [DONE]` makes it raise after the last chunk, while the openai SDK stops at any `[DONE]` and
raw clients still see a `data: [DONE]` line. A failure after the headers went out is one
`data: {"error": {...}}` event (the openai SDK raises APIError on it) followed by the same end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol

import orjson
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.core.errors import ShuttingDown
from gateway.core.streams import Watch

DONE = b"event: done\ndata: [DONE]\n\n"


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


LAST_EVENT_TIMEOUT = 1.0  # seconds the stopping server gives a client to take a stream's last event


class EventSource(Protocol):
    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None:
        """Release everything behind the events; called exactly once, however the response ends."""


class EventStreamResponse(StreamingResponse):
    """A `text/event-stream` response that stops its producer as soon as the client leaves.

    Starlette's StreamingResponse cancels through an anyio cancel scope, which re-cancels every
    await in the producer's clean-up (closing the vendor connection, recording usage); plain
    asyncio cancellation is delivered once. A client that stops reading is dropped after
    `send_timeout` seconds instead of pinning the vendor call. `source.aclose()` always runs.
    A stream cancelled from outside (the server's graceful shutdown period is over) ends with an
    error event and the usual end, not a cut.
    """

    media_type = "text/event-stream"

    def __init__(self, source: EventSource, headers: dict[str, str], send_timeout: float) -> None:
        super().__init__(source, headers=headers)  # StreamingResponse sets no Content-Length
        self.source = source
        self.send_timeout = send_timeout
        self._open = False  # headers sent, end not yet sent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._serve(receive, send)
        except asyncio.CancelledError:
            if self._open:  # the producer was stopped at an await, between two whole events
                await self._end_stopped(send)
            raise

    async def _serve(self, receive: Receive, send: Send) -> None:
        producer = asyncio.create_task(self._produce(send))
        watcher = asyncio.create_task(_wait_for_disconnect(receive))
        try:
            await asyncio.wait((producer, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (producer, watcher):
                task.cancel()
            await asyncio.gather(producer, watcher, return_exceptions=True)
            await self.source.aclose()
        if not producer.cancelled() and (error := producer.exception()) is not None:
            # OSError: the client went away while we were sending; TimeoutError: it stopped reading.
            if not isinstance(error, OSError | TimeoutError):
                raise error

    async def _produce(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        self._open = True
        watch = Watch()  # one timer for every write of the stream
        try:
            async for data in self.source:
                await watch.wait(send({"type": "http.response.body", "body": data, "more_body": True}),
                                 watch.now() + self.send_timeout)
        finally:
            watch.close()
        self._open = False
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _end_stopped(self, send: Send) -> None:
        stopped = ShuttingDown("the gateway is shutting down; the stream was stopped before its end",
                               code="shutting_down")
        # The server is stopping: a client that cannot take the last event at once is not waited for.
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(min(self.send_timeout, LAST_EVENT_TIMEOUT)):
                await send({"type": "http.response.body", "body": event(stopped.body()) + DONE, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
