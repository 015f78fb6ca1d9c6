"""A chat completion's answer as the client reads it: the contract's `ChatCompletionResponse`
(whole) and its streamed chunks' choices (`delta`s). Written as dicts and encoded by orjson, the
measured fast path (docs/performance.md); tests/unit/test_answers.py holds every answer to the
generated models."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.core.chat import ChatChoice
from gateway.core.completion import Choice, Result, Usage
from gateway.endpoints.usage import usage_body


def body(head: Mapping[str, Any], result: Result, usage: Usage) -> bytes:
    answer: dict[str, Any] = {
        **head,
        "object": "chat.completion",
        "choices": [choice(c) for c in sorted(result.choices, key=lambda c: c.index)],
        "usage": usage_body(usage),
    }
    if result.system_fingerprint:
        answer["system_fingerprint"] = result.system_fingerprint
    return orjson.dumps(answer)


def choice(choice: Choice) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": choice.text or None}
    if isinstance(choice, ChatChoice):
        if choice.tool_calls:
            message["tool_calls"] = choice.tool_calls
        if choice.function_call is not None:
            message["function_call"] = choice.function_call
        message["refusal"] = choice.refusal
    if message["content"] is None and not message.get("tool_calls") and message.get("function_call") is None:
        message["content"] = ""
    return {"index": choice.index, "message": message, "finish_reason": choice.finish_reason or "stop",
            "logprobs": choice.logprobs}


class Shape:
    """A streamed chat completion's choices as OpenAI sends them: `delta.role` on each choice's
    first chunk, then its content, tool call and refusal pieces, its one finish reason."""

    def __init__(self) -> None:
        self._begun: set[int] = set()

    def piece(self, choice: Choice, finish: str | None) -> dict[str, Any] | None:
        delta: dict[str, Any] = {}
        if choice.index not in self._begun:
            self._begun.add(choice.index)
            delta = {"role": "assistant", "content": ""}
        if choice.text:
            delta["content"] = choice.text
        if isinstance(choice, ChatChoice):
            if choice.tool_calls:
                delta["tool_calls"] = choice.tool_calls
            if choice.function_call:
                delta["function_call"] = choice.function_call
            if choice.refusal:
                delta["refusal"] = choice.refusal
        if not delta and finish is None and not choice.logprobs:
            return None
        return {"index": choice.index, "delta": delta, "finish_reason": finish, "logprobs": choice.logprobs}

    def closing(self, index: int) -> dict[str, Any]:
        delta = {} if index in self._begun else {"role": "assistant", "content": ""}
        return {"index": index, "delta": delta, "finish_reason": "stop", "logprobs": None}
