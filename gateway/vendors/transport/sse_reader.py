"""Reading server-sent events from a vendor (OpenAI, Anthropic and Gemini all stream SSE).

The events are read a vendor read at a time: whatever arrived together is parsed in one pass and
handed on as one list, so that a stream costs one trip through the layers above per read rather
than per event (a fast vendor's read holds many events; a slow one's, one).
"""

from __future__ import annotations

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


class EventParser:
    """The events of a stream fed in pieces as they arrive (`feed`: the events they complete).
    Lines may be split across pieces at any byte; an event that is not finished by a blank line
    when the stream ends is dropped, as the SSE spec says."""

    __slots__ = ("_max", "_rest", "_event", "_data", "_size")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._max = max_event_bytes
        self._rest: bytes | bytearray = b""  # the start of a line whose end has not arrived
        self._event: str | None = None
        self._data: list[str] = []
        self._size = 0  # bytes of the event so far

    def feed(self, piece: bytes) -> list[Event]:
        end = piece.rfind(b"\n")
        if end < 0:  # no line ends here: only the unfinished line grows (in place: a long one is copied once)
            rest = self._rest if isinstance(self._rest, bytearray) else bytearray(self._rest)
            rest += piece
            self._rest = rest
            if self._size + len(rest) > self._max:
                raise MalformedStream(f"an event is larger than {self._max} bytes")
            return []
        lines = (self._rest + piece[:end] if self._rest else piece[:end]).split(b"\n")
        self._rest = piece[end + 1:]
        events: list[Event] = []
        data, size, limit = self._data, self._size, self._max
        for line in lines:
            if line[-1:] == b"\r":
                line = line.rstrip(b"\r")
            if not line:
                if data:
                    events.append(Event(self._event, "\n".join(data)))
                    data = []
                self._event, size = None, 0
                continue
            if line[:1] == b":":
                continue  # comment / keep-alive
            size += len(line)
            if size > limit:
                raise MalformedStream(f"an event is larger than {limit} bytes")
            if line[:6] == b"data: ":
                name, value = b"data", line[6:]
            else:
                name, _, value = line.partition(b":")
                if value[:1] == b" ":
                    value = value[1:]
            if name == b"data":
                data.append(_text(value))
            elif name == b"event":
                self._event = _text(value)
        self._data, self._size = data, size
        if size + len(self._rest) > limit:
            raise MalformedStream(f"an event is larger than {limit} bytes")
        return events


def _text(value: bytes) -> str:
    try:
        return value.decode()
    except UnicodeDecodeError as exc:
        raise MalformedStream(f"stream is not UTF-8: {exc.reason} at byte {exc.start}") from None
