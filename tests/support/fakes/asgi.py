"""The little HTTP a fake vendor needs: read the request, answer JSON, stream server-sent events."""

from __future__ import annotations

import json
from typing import Any


async def read_request(scope, receive) -> tuple[dict[str, str], bytes]:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    return {k.decode(): v.decode() for k, v in scope["headers"]}, body


async def send_json(send, status: int, body: Any, extra_headers=()) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *extra_headers]})
    await send({"type": "http.response.body", "body": data})


async def start_events(send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})


async def send_event(send, data: Any, event: str | None = None) -> None:
    head = f"event: {event}\n" if event else ""
    chunk = f"{head}data: {json.dumps(data)}\n\n".encode()
    await send({"type": "http.response.body", "body": chunk, "more_body": True})


async def end_events(send) -> None:
    await send({"type": "http.response.body", "body": b"", "more_body": False})


class Recorder:
    """What a fake received, and every way a request broke the vendor's documented shape."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []  # {"path", "query", "headers", "body"}
        self.violations: list[str] = []
        self.raw_paths: list[bytes] = []  # of every request, routed or not, as sent

    def clear(self) -> None:
        self.requests.clear()
        self.violations.clear()
        self.raw_paths.clear()
