"""What Anthropic's Messages API (`POST /v1/messages`) is on the wire for both of the gateway's
endpoints: its headers, its usage, and a stream's flow of events. vendors/anthropic/completions.py serves
completions over it and vendors/anthropic/chat.py chat; they differ only in what they read from a
message's content blocks.

A stream is message_start (the prompt's usage), then per content block content_block_start,
content_block_delta... and content_block_stop, then message_delta (stop_reason, the output's
usage, cumulative) and message_stop; `ping` may come anywhere and an `error` event ends it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.core.completion import Chunk, Usage
from gateway.core.config import VendorConfig
from gateway.core.errors import VendorFailed
from gateway.vendors import untrusted as read
from gateway.vendors.transport.sse_reader import Event
from gateway.vendors.vendor_errors import redact

API_VERSION = "2023-06-01"
MESSAGES = "/v1/messages"
# The stop reasons both endpoints read alike; chat adds tool_use (anthropic/chat.py).
FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}


def headers(key: str) -> dict[str, str]:
    return {"x-api-key": key, "anthropic-version": API_VERSION}


def finish_reason(stop_reason: Any, finish: Mapping[str, str]) -> str:
    """OpenAI's finish reason for a stop reason (pause_turn and reasons added later: "stop")."""
    return finish.get(read.text(stop_reason, "stop_reason"), "stop")


def usage(raw: dict[str, Any]) -> Usage:
    """Anthropic counts cache reads and writes apart from `input_tokens`; OpenAI's prompt_tokens
    includes them, with the cache reads as `cached_tokens`."""
    cached = read.count(raw.get("cache_read_input_tokens"), "usage.cache_read_input_tokens")
    written = read.count(raw.get("cache_creation_input_tokens"), "usage.cache_creation_input_tokens")
    details: dict[str, int] = {"cached_tokens": cached}
    if written:
        details["cache_creation_tokens"] = written
    return read.usage(read.count(raw.get("input_tokens"), "usage.input_tokens") + cached + written,
                      read.count(raw.get("output_tokens"), "usage.output_tokens"), "usage", details)


def message_blocks(data: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A non-streamed Message and its content blocks; untrusted.Malformed when it is not one."""
    data = read.obj(data, "the message")
    if "content" not in data or "usage" not in data:
        raise read.Malformed("the message lacks content or usage")
    return data, [read.obj(block, "a content block") for block in read.items(data.get("content"), "content")]


class Events:
    """A Messages stream, one decoded event at a time: the message's events read here, its content
    blocks' by `content` (each endpoint's own), the last chunk made by `last` with the finish
    reason and usage (`stopped` is then set). untrusted.Reported for an `error` event."""

    finish: Mapping[str, str] = FINISH

    def __init__(self) -> None:
        self._usage: dict[str, Any] = {}
        self._finish: str | None = None
        self.stopped = False

    def read(self, event: Any) -> Chunk | None:
        event = read.obj(event, "an event")
        kind = event.get("type")
        if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            return self.content(kind, event)
        if kind == "message_start":
            self._usage.update(read.obj(read.obj(event.get("message"), "message").get("usage"), "usage"))
        elif kind == "message_delta":  # its usage counts are cumulative
            self._usage.update(read.obj(event.get("usage"), "usage"))
            self._finish = finish_reason(read.obj(event.get("delta"), "a delta").get("stop_reason"), self.finish)
        elif kind == "message_stop":
            self.stopped = True
            return self.last(self._finish or "stop", usage(self._usage))
        elif kind == "error":
            error = read.obj(event.get("error"), "error")
            kind_of_error = error.get("type") if isinstance(error.get("type"), str) else "error"
            message = error.get("message") if isinstance(error.get("message"), str) else ""
            raise read.Reported(f"{kind_of_error[:64]}: {message}")
        # ping, and event types added later (Anthropic's versioning policy), carry nothing.
        return None

    def content(self, kind: str, event: dict[str, Any]) -> Chunk | None:
        raise NotImplementedError

    def last(self, finish: str, usage: Usage) -> Chunk:
        raise NotImplementedError


class MessageStream:
    """One try's stream (vendors/transport/answers.py `StreamDecoder`): its events as chunks, up to message_stop."""

    __slots__ = ("_name", "_config", "_reader")

    def __init__(self, config: VendorConfig, reader: Events) -> None:
        self._name = config.name
        self._config = config
        self._reader = reader

    def read(self, batch: list[Event]) -> tuple[list[Chunk], bool, VendorFailed | None]:
        chunks = []
        reader = self._reader
        for sse in batch:
            try:
                chunk = reader.read(orjson.loads(sse.data))
            except read.READ_ERRORS as exc:
                return chunks, False, VendorFailed(
                    f"vendor '{self._name}' sent a malformed stream event: {read.why(exc)}", vendor=self._name)
            except read.Reported as exc:
                message = redact(self._config, exc.message) or "no reason given"
                return chunks, False, VendorFailed(f"vendor '{self._name}' failed mid-stream: {message}",
                                                   vendor=self._name)
            if chunk is not None:
                chunks.append(chunk)
            if reader.stopped:
                return chunks, True, None
        return chunks, False, None

    def end(self) -> list[Chunk]:
        raise VendorFailed(f"vendor '{self._name}' ended the stream before message_stop", vendor=self._name)
