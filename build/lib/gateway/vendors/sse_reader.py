"""Reading server-sent events from a vendor (OpenAI, Anthropic and Gemini all stream SSE)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass


@dataclass(slots=True)
class Event:
    event: str | None
    data: str


class MalformedStream(ValueError):
    """The vendor's stream is not valid SSE (or not UTF-8)."""


async def read_events(chunks: AsyncIterable[bytes]) -> AsyncIterator[Event]:
    """Events as they complete. Lines may arrive split across chunks at any byte; an event
    that is not finished by a blank line when the stream ends is dropped, as the SSE spec says."""
    buffer = bytearray()
    event: str | None = None
    data: list[str] = []
    async for chunk in chunks:
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            line = bytes(buffer[start:end]).rstrip(b"\r")
            start = end + 1
            if not line:
                if data:
                    yield Event(event, "\n".join(data))
                event, data = None, []
                continue
            if line[:1] == b":":
                continue  # comment / keep-alive
            name, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            try:
                text = value.decode()
            except UnicodeDecodeError as exc:
                raise MalformedStream(f"stream is not UTF-8: {exc}") from None
            if name == b"data":
                data.append(text)
            elif name == b"event":
                event = text
        del buffer[:start]
