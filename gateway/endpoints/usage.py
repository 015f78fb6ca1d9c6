"""The usage every endpoint's answer carries: the contract's `CompletionUsage` (chat's is the same
object), with `estimated` when the gateway counted it because the vendor reported none."""

from __future__ import annotations

from typing import Any

from gateway.core.completion import Usage


def usage_body(usage: Usage) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    if usage.prompt_tokens_details:
        body["prompt_tokens_details"] = usage.prompt_tokens_details
    if usage.completion_tokens_details:
        body["completion_tokens_details"] = usage.completion_tokens_details
    if usage.estimated:
        body["estimated"] = True
    return body
