"""Reading server-sent events from a vendor (OpenAI, Anthropic and Gemini all stream SSE)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

# The most one event may hold (its lines together, or one line still waiting for its end), in
# bytes. A vendor's event is one chunk of a completion, far smaller; without a bound, a vendor that
# never ends a line would make the gateway buffer it until memory runs out.
MAX_EVENT_BYTES = 4 << 20


@dataclass(slots=True)
class Event:
    event: str | None
    data: str


class MalformedStream(ValueError):
    """The vendor's stream is not valid SSE (or not UTF-8, or an event is over MAX_EVENT_BYTES)."""


async def read_events(chunks: AsyncIterable[bytes], max_event_bytes: int = MAX_EVENT_BYTES) -> AsyncIterator[Event]:
    """Events as they complete. Lines may arrive split across chunks at any byte; an event
    that is not finished by a blank line when the stream ends is dropped, as the SSE spec says."""
    buffer = bytearray()
    scanned = 0  # bytes of `buffer` known to hold no line end: a long line is searched once
    event: str | None = None
    data: list[str] = []
    size = 0  # bytes of the event so far
    async for chunk in chunks:
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", max(start, scanned))) >= 0:
            line = bytes(buffer[start:end]).rstrip(b"\r")
            start = end + 1
            if not line:
                if data:
                    yield Event(event, "\n".join(data))
                event, data, size = None, [], 0
                continue
            if line[:1] == b":":
                continue  # comment / keep-alive
            size += len(line)
            if size > max_event_bytes:
                raise MalformedStream(f"an event is larger than {max_event_bytes} bytes")
            name, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            try:
                text = value.decode()
            except UnicodeDecodeError as exc:
                raise MalformedStream(f"stream is not UTF-8: {exc.reason} at byte {exc.start}") from None
            if name == b"data":
                data.append(text)
            elif name == b"event":
                event = text
        del buffer[:start]
        scanned = len(buffer)
        if size + len(buffer) > max_event_bytes:
            raise MalformedStream(f"an event is larger than {max_event_bytes} bytes")
