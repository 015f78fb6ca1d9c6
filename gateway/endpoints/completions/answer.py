"""A completion's answer as the client reads it: the contract's `CompletionResponse` (whole) and
its streamed chunks' choices. Written as dicts and encoded by orjson, the measured fast path
(docs/performance.md); tests/unit/test_answers.py holds every answer to the generated models."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.core.completion import Choice, Result, Usage
from gateway.endpoints.usage import usage_body


def body(head: Mapping[str, Any], result: Result, usage: Usage) -> bytes:
    answer: dict[str, Any] = {
        **head,
        "object": "text_completion",
        "choices": [choice(c, c.finish_reason or "stop") for c in result.choices],
        "usage": usage_body(usage),
    }
    if result.system_fingerprint:
        answer["system_fingerprint"] = result.system_fingerprint
    return orjson.dumps(answer)


def choice(choice: Choice, finish_reason: str | None) -> dict[str, Any]:
    # `logprobs` is null when not asked for (or, in a stream, when this piece has none), as OpenAI sends it.
    return {"index": choice.index, "text": choice.text, "finish_reason": finish_reason, "logprobs": choice.logprobs}


class Shape:
    """A streamed completion's choices: their text, finish reason and logprobs."""

    def piece(self, choice: Choice, finish: str | None) -> dict[str, Any] | None:
        if choice.text or finish or choice.logprobs:
            return {"index": choice.index, "text": choice.text, "finish_reason": finish, "logprobs": choice.logprobs}
        return None

    def closing(self, index: int) -> dict[str, Any]:
        return choice(Choice(index, ""), "stop")


SHAPE = Shape()  # it keeps nothing: one for every stream
