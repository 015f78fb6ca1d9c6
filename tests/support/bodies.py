"""Reading answers: server-sent event bodies, completion streams per choice, JSON trees."""

from __future__ import annotations

import json
from typing import Any


def sse_events(text: str) -> list[dict]:
    """Parse an SSE body into [{"event": ..., "data": ...}]."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        event = {"event": None, "data": []}
        for line in block.split("\n"):
            name, _, value = line.partition(": ")
            if name == "data":
                event["data"].append(value)
            elif name == "event":
                event["event"] = value
        event["data"] = "\n".join(event["data"])
        events.append(event)
    return events


def chunks_of(text: str) -> list[dict]:
    """The completion chunks of a stream (every event without an event name)."""
    return [json.loads(e["data"]) for e in sse_events(text) if e["event"] is None]


def streamed(text: str) -> tuple[dict[int, str], dict[int, list[str]], list[dict]]:
    """A stream's text and finish reasons per choice index, and its chunks."""
    chunks = chunks_of(text)
    texts: dict[int, str] = {}
    finishes: dict[int, list[str]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
            if choice["finish_reason"]:
                finishes.setdefault(choice["index"], []).append(choice["finish_reason"])
    return texts, finishes, chunks


def contains(node: Any, value: Any) -> bool:
    """Whether `value` is `node` or sits anywhere inside it (JSON: dicts' values, lists' items)."""
    if node == value:
        return True
    if isinstance(node, dict):
        return any(contains(v, value) for v in node.values())
    if isinstance(node, list):
        return any(contains(v, value) for v in node)
    return False
