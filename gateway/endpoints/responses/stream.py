"""Chat completion chunks' choices in, OpenAI's Responses stream events out.

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

import json
from collections.abc import Iterable
from typing import Any

import orjson

from gateway.core.chat import ChatChoice
from gateway.core.completion import Choice
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
    response as far as it went (after `end`, the whole of it, as the terminal event has it).

    An event is a value as it was when made, without deep copies (a large part of a stream's
    cost: docs/performance.md#responses-beside-chat): an event that shows an item or part still
    growing (`.added`) carries a copy of its few fields (the lists in it empty, the strings
    immutable), one that shows it finished (`.done`, the terminal event) carries it as it is,
    since nothing changes it after. A growing text or arguments is kept as its pieces, joined when
    read (`.done`, `response`): appended to one string, a long stream copied all it had at every
    delta."""

    def __init__(self, request: dict[str, Any], *, response_id: str, created_at: int, model: str) -> None:
        self._response = shell(request, response_id=response_id, created_at=created_at, model=model)
        self._sequence = 0
        self._message: dict[str, Any] | None = None  # the open message item, if any
        self._part: dict[str, Any] | None = None  # its open content part, if any
        self._delta: dict[str, Any] = {}  # the open part's delta event, but its sequence number and delta
        self._calls: dict[int, dict[str, Any]] = {}  # chat's tool-call index -> its open item
        self._open: list[dict[str, Any]] = []  # open items, in output order
        self._index: dict[str, int] = {}  # an item's place in the output, by its id
        # What grows, by key ("part", a call's item id): where its text goes, and its pieces so far.
        self._pieces: dict[str, tuple[dict[str, Any], str, list[str]]] = {}
        self._part_pieces: list[str] = []  # the open part's (in `_pieces` too)
        self._finish: str | None = None
        self.ended = False

    @property
    def response(self) -> dict[str, Any]:
        for key in self._pieces:
            self._joined(key, done=False)
        return self._response

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _add(self, item: dict[str, Any]) -> None:
        output = self._response["output"]
        if len(output) == MAX_OUTPUT_ITEMS:
            raise Unexpected(f"more than {MAX_OUTPUT_ITEMS} output items")
        self._index[item["id"]] = len(output)
        output.append(item)
        self._open.append(item)

    def _growing(self, key: str, holder: dict[str, Any], field: str) -> list[str]:
        """The list `holder[field]`'s pieces go to (it holds none yet)."""
        pieces: list[str] = []
        self._pieces[key] = (holder, field, pieces)
        return pieces

    def _joined(self, key: str, *, done: bool = True) -> None:
        """`holder[field]` as its pieces so far make it; `done`: no more will come."""
        holder, field, pieces = self._pieces.pop(key) if done else self._pieces[key]
        holder[field] = "".join(pieces)

    def start(self) -> list[dict[str, Any]]:
        snapshot = {**self._response, "output": []}  # (only the output grows in place: the rest is replaced)
        return [self._event("response.created", response=snapshot),
                self._event("response.in_progress", response=snapshot)]

    def feed(self, choices: Iterable[Choice]) -> list[dict[str, Any]]:
        """The events a chunk's chat choices make (none for choices that add nothing). `Unexpected`
        when the vendor makes more items than the contract carries: end the stream with `error`."""
        events: list[dict[str, Any]] = []
        for choice in choices:
            if choice.index != 0:
                continue  # a Responses request asks chat for one choice
            if choice.text:
                events += self._text("output_text", choice.text)
            if isinstance(choice, ChatChoice):
                if choice.refusal:
                    events += self._text("refusal", choice.refusal)
                for call in choice.tool_calls or ():
                    events += self._call(call)
            if choice.finish_reason:
                self._finish = choice.finish_reason
        return events

    def _text(self, kind: str, delta: str) -> list[dict[str, Any]]:
        if self._part is not None and self._part["type"] == kind:  # the usual case: a piece of the open part
            self._part_pieces.append(delta)
            event = self._delta.copy()  # (in the events' order: its sequence and delta set in place)
            event["sequence_number"] = self._sequence
            event["delta"] = delta
            if kind == "output_text":
                event["logprobs"] = []
            self._sequence += 1
            return [event]
        events = []
        if self._message is None:
            message = message_item(None, None, item_id=new_id("msg_"), status="in_progress")
            self._add(message)
            self._message = message
            events.append(self._event("response.output_item.added", output_index=self._index[message["id"]],
                                      item={**message, "content": []}))
        message = self._message
        events += self._close_part()
        self._part = {"type": kind, "text": "", "annotations": []} if kind == "output_text" else \
            {"type": "refusal", "refusal": ""}
        self._part_pieces = self._growing("part", self._part, "text" if kind == "output_text" else "refusal")
        message["content"].append(self._part)
        self._delta = {"type": f"response.{kind}.delta", "sequence_number": 0, "item_id": message["id"],
                       "output_index": self._index[message["id"]], "content_index": len(message["content"]) - 1}
        added = {**self._part, "annotations": []} if kind == "output_text" else dict(self._part)
        events.append(self._event("response.content_part.added", **_where(self._delta), part=added))
        return events + self._text(kind, delta)

    def _close_part(self) -> list[dict[str, Any]]:
        part = self._part
        if part is None:
            return []
        self._part = None
        self._joined("part")
        where = _where(self._delta)
        if part["type"] == "output_text":
            done = self._event("response.output_text.done", **where, text=part["text"], logprobs=[])
        else:
            done = self._event("response.refusal.done", **where, refusal=part["refusal"])
        return [done, self._event("response.content_part.done", **where, part=part)]  # (finished: not copied)

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
            self._growing(item["id"], item, "arguments")
            events.append(self._event("response.output_item.added", output_index=self._index[item["id"]],
                                      item=dict(item)))
        if function.get("arguments"):
            self._pieces[item["id"]][2].append(function["arguments"])
            events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                      output_index=self._index[item["id"]], delta=function["arguments"]))
        return events

    def _close_item(self, item: dict[str, Any], status: str) -> list[dict[str, Any]]:
        events = []
        if item is self._message:
            events += self._close_part()
            self._message = None
        else:
            self._joined(item["id"])
            events.append(self._event("response.function_call_arguments.done", item_id=item["id"],
                                      output_index=self._index[item["id"]], arguments=item["arguments"],
                                      name=item["name"]))
            self._calls = {k: v for k, v in self._calls.items() if v is not item}
        item["status"] = status
        self._open.remove(item)
        events.append(self._event("response.output_item.done", output_index=self._index[item["id"]],
                                  item=item))  # (finished: not copied)
        return events

    def end(self, *, error: dict[str, str] | None = None, client_left: bool = False,
            usage: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Close every open item and send the one terminal event. `error` (`{"code", "message"}`):
        the vendor failed mid-stream, `response.failed`. `client_left`: `response.incomplete` with
        reason null (OpenAI's reasons have no name for it; the event is for the stored response,
        nobody reads it). Neither: as the vendor's `finish_reason` says; a stream that stopped
        without one failed (`server_error`). `usage` (chat's shape: the vendor's, else the caller's
        count) is the usage consumed, which the terminal event carries."""
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
        response = self.response
        response.update(status=status, incomplete_details=details, usage=usage_from_chat(usage))
        if error is not None:
            response["error"] = error_value(error)
        events.append(self._event(TERMINAL[status], response=response))  # (whole: nothing changes it after)
        return events


def _where(delta: dict[str, Any]) -> dict[str, Any]:
    """A part's place, as its events other than its deltas name it."""
    return {"item_id": delta["item_id"], "output_index": delta["output_index"], "content_index": delta["content_index"]}


def sse(event: dict[str, Any]) -> bytes:
    """One event on the wire, as OpenAI sends it: its type as the SSE event name, then its JSON."""
    try:  # orjson: a stream's events are many (one per delta), and json.dumps was a third of their cost
        data = orjson.dumps(event)
    except orjson.JSONEncodeError:  # a lone surrogate from a vendor: escaped, it is still valid JSON
        data = json.dumps(event, separators=(",", ":")).encode()
    return b"event: %s\ndata: %s\n\n" % (event["type"].encode(), data)
