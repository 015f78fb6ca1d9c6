"""The text of a native request and of its answer, for the gateway to count when the vendor reports
no usage (usage.py's "not reported"), and for the prompt's estimate a limit reserves.

A prompt is every string of `args` (messages, system prompts, tool definitions: vendors count tools
as input too), whatever the protocol, leaving out media sent inline (base64 `data`, `data:` URLs),
which vendors bill in their own units. An answer is the generated part of the protocol's answer
(text, thinking, tool calls' arguments), not its ids and labels, which would count a stream's event
names over and over; an `http` vendor's is at its configured pointer, else every string. Bounded:
the walk stops at MAX_TEXT characters, an estimate needs no more.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.endpoints.inference.wires import NativeWire
from gateway.vendors.http_server.pointer import resolve

# How much text one estimate reads, in characters: beyond what any context window holds.
MAX_TEXT = 8 << 20
# Members whose strings are media sent inline, not text.
_MEDIA = frozenset({"data", "b64_json", "inlineData", "inline_data", "bytes"})


def prompt_text(args: Any) -> str:
    return "\n".join(_strings(args))


def answer_text(wire: NativeWire, answer: Any) -> str:
    """The generated text of a plain answer (or, for each event of a stream, `event_text`)."""
    return "".join(_generated(wire, answer, stream=False))


def event_text(wire: NativeWire, event: Any) -> str:
    return "".join(_generated(wire, event, stream=True))


def _generated(wire: NativeWire, value: Any, stream: bool) -> list[str]:
    if not isinstance(value, dict):
        return []
    match wire.protocol:
        case "anthropic":
            blocks = [value.get("delta"), value.get("content_block")] if stream else _list(value.get("content"))
            return [piece for block in blocks if isinstance(block, dict)
                    for piece in _pieces(block, ("text", "thinking", "partial_json"), ("input",))]
        case "gemini":
            return [piece for candidate in _list(value.get("candidates")) if isinstance(candidate, dict)
                    for part in _list(_dict(candidate.get("content")).get("parts")) if isinstance(part, dict)
                    for piece in _pieces(part, ("text",), ("functionCall", "executableCode"))]
        case "openai":
            return [piece for choice in _list(value.get("choices")) if isinstance(choice, dict)
                    for message in (_dict(choice.get("delta" if stream else "message")),)
                    # `text`: a legacy completion's choice (an `inference_path` of /completions)
                    for piece in _pieces(choice, ("text",), ()) + _pieces(message, ("content", "reasoning_content",
                                                                                   "refusal"), ())
                    + [text for call in _list(message.get("tool_calls")) if isinstance(call, dict)
                       for text in _pieces(_dict(call.get("function")), ("name", "arguments"), ())]]
        case "local":
            return _pieces(value, ("content",), ())
        case "http":
            assert wire.http is not None
            pointer = wire.http.stream_completion_text if stream else wire.http.completion_text
            if pointer is None:
                return _strings(value)
            found = resolve(pointer, value)
            return [found] if isinstance(found, str) else []
    return _strings(value)


def _pieces(obj: dict[str, Any], texts: tuple[str, ...], structured: tuple[str, ...]) -> list[str]:
    out = [obj[name] for name in texts if isinstance(obj.get(name), str)]
    for name in structured:
        if isinstance(obj.get(name), dict | list) and obj[name]:
            out.append(orjson.dumps(obj[name]).decode()[:MAX_TEXT])
    return out


def _strings(value: Any) -> list[str]:
    """Every string in `value` (iteratively), but inline media, up to MAX_TEXT characters."""
    found: list[str] = []
    size = 0
    pending: list[Any] = [value]
    while pending and size < MAX_TEXT:
        item = pending.pop()
        if isinstance(item, str):
            if not item.startswith("data:"):
                found.append(item[: MAX_TEXT - size])
                size += len(found[-1])
        elif isinstance(item, dict):
            pending.extend(v for k, v in item.items() if k not in _MEDIA)
        elif isinstance(item, list):
            pending.extend(reversed(item))
    return found


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
