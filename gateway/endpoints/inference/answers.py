"""The endpoint's answers: the vendor's JSON wrapped as `generic_inference`, a stream's events as
`generic_inference.chunk`, each read and checked on its way.

A plain answer is the vendor's JSON document, unchanged, in `{"object": "generic_inference",
"response": ...}`. A stream is each vendor event's data, unchanged, in `{"object":
"generic_inference.chunk", "response": ...}`, then the gateway's end (`event: done`, `data:
[DONE]`, as every stream of the gateway ends: http/event_stream.py).

Untrusted as everything a vendor sends: an answer or event that is not JSON, or nested deeper than
MAX_DEPTH, is malformed (a 502, or an error event once the stream has started). A stream that ends
before the vendor's own end (Anthropic's `message_stop`, OpenAI's `[DONE]`, llama.cpp's `stop:
true`, a Gemini candidate's `finishReason`, an http vendor's `stream_end` member) was cut, and is
an error too; an event in which the vendor reports an error (Anthropic's `error` event, an
`{"error": ...}` object) ends it as the vendor's failure (untrusted.Reported). What is not JSON
and ends the vendor's stream (OpenAI's `[DONE]`) is not passed on.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from gateway.endpoints.inference.usage import Counted, UsageTally, read_usage
from gateway.endpoints.inference.wires import NativeWire
from gateway.vendors import untrusted as read
from gateway.vendors.http_server.wire import error_at, flag_at
from gateway.vendors.vendor_errors import payload_message

OBJECT = "generic_inference"
CHUNK_OBJECT = "generic_inference.chunk"
# How deep a vendor's JSON may nest. Their answers are a few levels deep (Gemini's grounding
# metadata, a tool call's arguments); a client's JSON parser may recurse on each level.
MAX_DEPTH = 64
OPENAI_DONE = "[DONE]"


def answer(response: Any) -> dict[str, Any]:
    return {"object": OBJECT, "response": response}


def chunk(event: Any) -> dict[str, Any]:
    return {"object": CHUNK_OBJECT, "response": event}


def decode(data: bytes | str, what: str) -> Any:
    """A vendor's JSON, bounded in depth. untrusted.Malformed when it is not."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise read.Malformed(f"{what} is not JSON") from None
    if too_deep(value, MAX_DEPTH):
        raise read.Malformed(f"{what} nests deeper than {MAX_DEPTH} levels")
    if _any(value, float) and _any(json.loads(data), _beyond_64_bits):
        # orjson reads an integer beyond 64 bits as a float (another value than the vendor's) and
        # cannot write one back: it is not passed on changed, nor failed on later.
        raise read.Malformed(f"{what} holds an integer beyond 64 bits")
    return value


def _beyond_64_bits(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64


def _any(value: Any, test: type | Any) -> bool:
    """Whether a value of `value` (a type, or a predicate) is anywhere in `value` (iteratively)."""
    check = (lambda item: isinstance(item, test)) if isinstance(test, type) else test
    pending = [value]
    while pending:
        item = pending.pop()
        if check(item):
            return True
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def too_deep(value: Any, limit: int) -> bool:
    """Whether `value` nests more than `limit` arrays and objects (iteratively: no recursion on
    the vendor's data)."""
    level: list[Any] = [value]
    depth = 0
    while level:
        level = [child for item in level if isinstance(item, dict | list)
                 for child in (item.values() if isinstance(item, dict) else item)]
        depth += 1
        if depth >= limit and any(isinstance(item, dict | list) for item in level):
            return True
    return False


def read_answer(wire: NativeWire, body: bytes) -> tuple[dict[str, Any], Counted]:
    """A plain answer (the vendor's 2xx body): what the client gets, and what it used."""
    response = decode(body, "the answer")
    return answer(response), read_usage(wire, response)


class NativeStream:
    """A vendor's stream, event by event: `take` each event's data (SSE data, or a JSON line) and
    send what it returns; `finish` when the vendor's body ended. `counted` is the usage so far."""

    def __init__(self, wire: NativeWire, *, usage_asked_by_gateway: bool = False) -> None:
        self._wire = wire
        self._withhold_usage = usage_asked_by_gateway
        self._tally = UsageTally(wire)
        self.ended = False  # the vendor's own end was seen
        if wire.protocol == "http" and (wire.http is None or wire.http.stream_end is None):
            self.ended = True  # no end mark configured: the body's end is the stream's

    @property
    def counted(self) -> Counted:
        return self._tally.counted

    def take(self, data: str) -> dict[str, Any] | None:
        """The chunk to send for one event, or None when it is not the client's (OpenAI's `[DONE]`,
        the usage-only chunk the gateway asked for). untrusted.Reported when the vendor reports an
        error in it; untrusted.Malformed when it is not an event of the protocol."""
        if self._wire.protocol == "openai" and data.strip() == OPENAI_DONE:
            self.ended = True
            return None
        event = decode(data, "a stream event")
        if (message := self._error(event)) is not None:
            raise read.Reported(message)
        self._tally.feed(event)
        if self._is_last(event):
            self.ended = True
        if self._withhold_usage and isinstance(event, dict) and event.get("choices") == [] and event.get("usage"):
            return None
        return chunk(event)

    def finish(self) -> Counted:
        """The usage of a stream whose body ended; untrusted.Malformed when it ended before the
        vendor's own end (the vendor was cut off, or cut itself off)."""
        if not self.ended:
            raise read.Malformed("the stream ended before the vendor's last event")
        return self._tally.counted

    def _error(self, event: Any) -> str | None:
        if not isinstance(event, dict):
            return None
        if self._wire.protocol == "http":
            assert self._wire.http is not None
            return error_at(self._wire.http.error, event)
        if self._wire.protocol == "anthropic":
            return (payload_message(event) or "error event") if event.get("type") == "error" else None
        if "error" in event and event["error"] is not None:
            return payload_message(event) or "error event"
        return None

    def _is_last(self, event: Any) -> bool:
        if not isinstance(event, dict):
            return False
        match self._wire.protocol:
            case "anthropic":
                return event.get("type") == "message_stop"
            case "local":
                return event.get("stop") is True
            case "gemini":
                candidates = event.get("candidates")
                finished = isinstance(candidates, list) and any(
                    isinstance(c, dict) and c.get("finishReason") for c in candidates)
                feedback = event.get("promptFeedback")
                return finished or (isinstance(feedback, dict) and bool(feedback.get("blockReason")))
            case "http":
                assert self._wire.http is not None
                return flag_at(self._wire.http.stream_end, event)
        return False
