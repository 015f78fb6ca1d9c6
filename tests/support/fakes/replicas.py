"""Replicas of one OpenAI-compatible vendor for the load-balancing tests: `Slow` answers like the
fake it wraps after a delay on every request (before the response head, as a loaded server
does), `Broken` answers 500 to everything. Each counts the completion requests it got."""

from __future__ import annotations

import asyncio

from tests.support.fakes.asgi import read_request, send_json
from tests.support.fakes.openai_upstream import FakeOpenAI


class Slow:
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.fake = FakeOpenAI()

    @property
    def requests(self) -> list:
        return self.fake.requests

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            await asyncio.sleep(self.delay)
        await self.fake(scope, receive, send)


class Broken:
    def __init__(self) -> None:
        self.requests: list[dict] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        headers, _ = await read_request(scope, receive)
        self.requests.append({"path": scope["path"], "headers": headers})
        await send_json(send, 500, {"error": {"message": "this replica is broken", "type": "server_error"}})
