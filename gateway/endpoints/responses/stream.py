"""Chat completion chunks in, OpenAI's Responses stream events out.

OpenAI's sequence: `response.created`, `response.in_progress`; per output item
`response.output_item.added`, for a message's part `response.content_part.added`, its
`response.output_text.delta`s (or `response.refusal.delta`s) and `.done`, `response.content_part.done`,
for a call `response.function_call_arguments.delta`s and `.done`; `response.output_item.done`; then
exactly one of `response.completed`, `response.incomplete`, `response.failed`, carrying the whole
response with its usage. Every event has `sequence_number`, from 0. There is no `[DONE]`.

Why a class that is fed and then ended, rather than a generator over the chunks: the stream's end
is not always the vendor's. A vendor that breaks off, or a client that leaves, ends it from outside
(`end(error=...)`, `end(client_left=True)`), and the terminal event must still close every open item and
carry the usage consumed so far: the issue's first complaint about other gateways is exactly a
terminal event without usage when a stream ends `incomplete` or `failed`.

Empty deltas are not sent: a vendor's empty text chunk (Anthropic's reasoning, a keep-alive) is no
output, and an `output_item.added` for nothing would leave an empty message in the response.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson

from gateway.endpoints.responses.answer import (
    MAX_OUTPUT_ITEMS,
    Unexpected,
    call_item,
    error_value,
    message_item,
    new_id,
    shell,
    status_of,
    usage_from_chat,
)

TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}


class ResponseStream:
    """One response's events, built as its chat chunks arrive. `start()` once, `feed(chunk)` for
    each chunk, `end(...)` once; each returns the events to send, in order. `response` is the
    response as far as it went (after `end`, the whole of it, as the terminal event has it)."""

    def __init__(self, request: dict[str, Any], *, response_id: str, created_at: int, model: str) -> None:
        self.response = shell(request, response_id=response_id, created_at=created_at, model=model)
        self._sequence = 0
        self._message: dict[str, Any] | None = None  # the open message item, if any
        self._part: dict[str, Any] | None = None  # its open content part, if any
        self._calls: dict[int, dict[str, Any]] = {}  # chat's tool-call index -> its open item
        self._open: list[dict[str, Any]] = []  # open items, in output order
        self._usage: dict[str, Any] | None = None
        self._finish: str | None = None
        self.ended = False

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _add(self, item: dict[str, Any]) -> None:
        if len(self.response["output"]) == MAX_OUTPUT_ITEMS:
            raise Unexpected(f"more than {MAX_OUTPUT_ITEMS} output items")
        self.response["output"].append(item)
        self._open.append(item)

    def _index(self, item: dict[str, Any]) -> int:
        return next(i for i, it in enumerate(self.response["output"]) if it is item)

    def start(self) -> list[dict[str, Any]]:
        snapshot = copy.deepcopy(self.response)
        return [self._event("response.created", response=snapshot),
                self._event("response.in_progress", response=copy.deepcopy(snapshot))]

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The events one chat chunk makes (none for a chunk that adds nothing). `Unexpected` when
        the vendor makes more items than the contract carries: end the stream with `error`."""
        events: list[dict[str, Any]] = []
        if chunk.get("usage"):
            self._usage = usage_from_chat(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # a Responses request asks chat for one choice
            delta = choice.get("delta") or {}
            if delta.get("content"):
                events += self._text("output_text", delta["content"])
            if delta.get("refusal"):
                events += self._text("refusal", delta["refusal"])
            for call in delta.get("tool_calls") or ():
                events += self._call(call)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return events

    def _text(self, kind: str, delta: str) -> list[dict[str, Any]]:
        events = []
        if self._message is None:
            message = message_item(None, None, item_id=new_id("msg_"), status="in_progress")
            self._add(message)
            self._message = message
            events.append(self._event("response.output_item.added", output_index=self._index(self._message),
                                      item=copy.deepcopy(self._message)))
        message = self._message
        where = {"item_id": message["id"], "output_index": self._index(message)}
        if self._part is None or self._part["type"] != kind:
            events += self._close_part()
            self._part = {"type": kind, "text": "", "annotations": []} if kind == "output_text" else \
                {"type": "refusal", "refusal": ""}
            message["content"].append(self._part)
            events.append(self._event("response.content_part.added", **where,
                                      content_index=len(message["content"]) - 1, part=copy.deepcopy(self._part)))
        field = "text" if kind == "output_text" else "refusal"
        self._part[field] += delta
        extra = {"logprobs": []} if kind == "output_text" else {}
        events.append(self._event(f"response.{kind}.delta", **where, content_index=len(message["content"]) - 1,
                                  delta=delta, **extra))
        return events

    def _close_part(self) -> list[dict[str, Any]]:
        part, message = self._part, self._message
        if part is None or message is None:
            return []
        self._part = None
        where = {"item_id": message["id"], "output_index": self._index(message),
                 "content_index": len(message["content"]) - 1}
        if part["type"] == "output_text":
            done = self._event("response.output_text.done", **where, text=part["text"], logprobs=[])
        else:
            done = self._event("response.refusal.done", **where, refusal=part["refusal"])
        return [done, self._event("response.content_part.done", **where, part=copy.deepcopy(part))]

    def _call(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        events = []
        index = call.get("index", 0)
        function = call.get("function") or {}
        item = self._calls.get(index)
        if item is None:
            if self._message is not None:  # a message's text comes before the calls it leads to
                events += self._close_item(self._message, "completed")
            item = call_item(call.get("id") or new_id("call_"), function.get("name") or "", "",
                             item_id=new_id("fc_"), status="in_progress")
            self._add(item)
            self._calls[index] = item
            events.append(self._event("response.output_item.added", output_index=self._index(item),
                                      item=copy.deepcopy(item)))
        if function.get("arguments"):
            item["arguments"] += function["arguments"]
            events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                      output_index=self._index(item), delta=function["arguments"]))
        return events

    def _close_item(self, item: dict[str, Any], status: str) -> list[dict[str, Any]]:
        events = []
        if item is self._message:
            events += self._close_part()
            self._message = None
        else:
            events.append(self._event("response.function_call_arguments.done", item_id=item["id"],
                                      output_index=self._index(item), arguments=item["arguments"], name=item["name"]))
            self._calls = {k: v for k, v in self._calls.items() if v is not item}
        item["status"] = status
        self._open.remove(item)
        events.append(self._event("response.output_item.done", output_index=self._index(item),
                                  item=copy.deepcopy(item)))
        return events

    def end(self, *, error: dict[str, str] | None = None, client_left: bool = False,
            usage: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Close every open item and send the one terminal event. `error` (`{"code", "message"}`):
        the vendor failed mid-stream, `response.failed`. `client_left`: `response.incomplete` with
        reason null (OpenAI's reasons have no name for it; the event is for the stored response,
        nobody reads it). Neither: as the vendor's `finish_reason` says; a stream that stopped
        without one failed (`server_error`). `usage` (chat's shape, the caller's count) stands in
        when the vendor reported none; the terminal event carries the usage consumed either way."""
        if self.ended:
            return []
        self.ended = True
        if error is None and not client_left and self._finish is None:
            error = {"code": "server_error", "message": "the vendor's stream ended before its answer did"}
        if error is not None:
            status, details = "failed", None
        elif client_left:
            status, details = "incomplete", {"reason": None}
        else:
            status, details = status_of(self._finish)
        events = []
        for item in list(self._open):
            events += self._close_item(item, "completed" if status == "completed" else "incomplete")
        self.response.update(status=status, incomplete_details=details,
                             usage=self._usage or usage_from_chat(usage))
        if error is not None:
            self.response["error"] = error_value(error)
        events.append(self._event(TERMINAL[status], response=copy.deepcopy(self.response)))
        return events


def sse(event: dict[str, Any]) -> bytes:
    """One event on the wire, as OpenAI sends it: its type as the SSE event name, then its JSON."""
    try:  # orjson: a stream's events are many (one per delta), and json.dumps was a third of their cost
        data = orjson.dumps(event)
    except orjson.JSONEncodeError:  # a lone surrogate from a vendor: escaped, it is still valid JSON
        data = json.dumps(event, separators=(",", ":")).encode()
    return b"event: " + event["type"].encode() + b"\ndata: " + data + b"\n\n"
