"""Replicas of one OpenAI-compatible vendor for the load-balancing tests: `Slow` answers like the
fake it wraps after a delay on every request (before the response head, as a loaded server
does), `Broken` answers 500 to everything, `Garbage` answers 200 and what is not an answer,
`Hanging` accepts every request and never answers. Each counts the completion requests it got."""

from __future__ import annotations

import asyncio
import itertools

from tests.support.fakes.asgi import read_request, send_json
from tests.support.fakes.openai_upstream import FakeOpenAI

# What `Garbage` answers with, in turn: (content type, body) for a stream and for a plain request.
GARBAGE_STREAMS = (
    (b"text/event-stream", b"data: \xff\xfe not UTF-8\n\n"),
    (b"text/event-stream", b"data: <p>not JSON</p>\n\n"),
    (b"text/event-stream", b'data: {"hello": "world"}\n\ndata: [DONE]\n\n'),  # JSON, but no chunk of a completion
    (b"text/event-stream", b"data: [DONE]\n\n"),  # the end marker, and nothing before it
    (b"text/html", b"<html><body>Welcome to nginx!</body></html>"),  # no event at all
    (b"text/event-stream", b'data: {"choices": "nonsense"}\n\n'),
)  # fmt: skip
GARBAGE_ANSWERS = (
    (b"text/html", b"<html><body>Welcome to nginx!</body></html>"),
    (b"application/json", b'{"hello": "world"}'),
    (b"application/json", b"[1, 2, 3]"),
    (b"application/json", b'{"choices": [{"index": 0, "text": 5}]}'),
    (b"application/json", b'{"choices": [{"index": 0, "te'),  # cut short
)  # fmt: skip


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


class Garbage:
    """200 to everything, with a body that is not the vendor's format: each kind of
    GARBAGE_STREAMS or GARBAGE_ANSWERS in turn."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self._turn = itertools.count()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        _, body = await read_request(scope, receive)
        if scope["path"].endswith("/completions"):  # not the gateway's GET /models as it starts
            self.requests.append({"path": scope["path"], "body": body})
        kinds = GARBAGE_STREAMS if b'"stream":true' in body.replace(b" ", b"") else GARBAGE_ANSWERS
        content_type, data = kinds[next(self._turn) % len(kinds)]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", content_type), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})


class Hanging:
    """Reads every request and never answers it: it only sees its caller leave. `requests`
    lists the completion requests that came, `left` counts those whose caller (the gateway) then
    closed the connection."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.left = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        _, body = await read_request(scope, receive)
        completion = scope["path"].endswith("/completions")  # not the gateway's GET /models as it starts
        if completion:
            self.requests.append({"path": scope["path"], "body": body})
        while (await receive())["type"] != "http.disconnect":
            pass
        self.left += completion
