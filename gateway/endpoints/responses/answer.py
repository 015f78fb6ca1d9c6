"""The `response` object (openapi.json `Response`): its shell, which echoes the request as OpenAI's
does, its ids, its usage, and a chat completion's answer shaped into it.

A chat answer's `finish_reason` decides the status: `length` is `incomplete` with reason
`max_output_tokens`, `content_filter` is `incomplete` with reason `content_filter`, anything else
`completed`. A call's `call_id` is the chat tool call's own id, unchanged: the next turn's
`function_call_output` names it, and the vendor matches the result to its call by it.
"""

from __future__ import annotations

from typing import Any, get_args

from gateway.core.ids import ids
from generated.models import Response, ResponseError

INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
# OpenAI's error codes of a failed response (the contract's list): a client matches on them.
ERROR_CODES = frozenset(get_args(ResponseError.model_fields["code"].annotation))
MAX_ERROR_MESSAGE = 4096  # the contract's bound
# The contract's bound on a response's output items: a vendor that makes more (a hostile one calling
# tools without end) answered what the contract cannot carry.
MAX_OUTPUT_ITEMS = next(m.max_length for m in Response.model_fields["output"].metadata if hasattr(m, "max_length"))


class Unexpected(ValueError):
    """The vendor's answer holds what the contract has no place for: the vendor's failure (502),
    or, mid-stream, the stream's end with `error`."""


def error_value(error: dict[str, Any]) -> dict[str, str]:
    """A failed response's `error`: the code when it is one of OpenAI's, else `server_error`."""
    code = error.get("code")
    return {"code": code if code in ERROR_CODES else "server_error",
            "message": str(error.get("message") or "")[:MAX_ERROR_MESSAGE]}


def new_id(prefix: str) -> str:
    """A new id of OpenAI's kind: `resp_`, `msg_`, `fc_` followed by 32 hex digits."""
    return prefix + ids.next()


def shell(request: dict[str, Any], *, response_id: str, created_at: int, model: str,
          status: str = "in_progress") -> dict[str, Any]:
    """The response to `request` before any output: what it echoes of the request, with OpenAI's
    defaults for what the request left out. `model` is the model that answers (`vendor/name`)."""
    return {
        "id": response_id, "object": "response", "created_at": created_at, "status": status,
        "error": None, "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": model, "output": [],
        "parallel_tool_calls": request.get("parallel_tool_calls", True) is not False,
        "previous_response_id": request.get("previous_response_id"),
        "reasoning": request.get("reasoning"),
        "store": request.get("store") is not False,
        "temperature": request.get("temperature"),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": list(request.get("tools") or ()),
        "top_p": request.get("top_p"),
        "truncation": request.get("truncation") or "disabled",
        "usage": None,
        "user": request.get("user"),
        "metadata": request.get("metadata") or {},
    }


def usage_from_chat(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """Chat's usage as the Responses API's (None stays None: the caller counts it then)."""
    if usage is None:
        return None
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    written = int(details.get("cache_write_tokens") or 0)  # a vendor's cache writes, where its translator says
    reasoning = int((usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": int(usage.get("total_tokens") or prompt + completion)}


def status_of(finish_reason: str | None) -> tuple[str, dict[str, str] | None]:
    """(status, incomplete_details) for a chat choice's `finish_reason`."""
    reason = INCOMPLETE_REASONS.get(finish_reason or "")
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def message_item(text: str | None, refusal: str | None, *, item_id: str, status: str) -> dict[str, Any]:
    """The assistant's message item: its text, then its refusal, each one part."""
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "output_text", "text": text, "annotations": []})
    if refusal is not None:
        content.append({"type": "refusal", "refusal": refusal})
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": content}


def call_item(call_id: str, name: str, arguments: str, *, item_id: str, status: str) -> dict[str, Any]:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


def output_items(message: dict[str, Any], status: str = "completed") -> list[dict[str, Any]]:
    """A chat answer's message as output items: the message (when it said or refused anything),
    then one `function_call` per tool call, in order."""
    if len(message.get("tool_calls") or ()) >= MAX_OUTPUT_ITEMS:
        raise Unexpected(f"more than {MAX_OUTPUT_ITEMS - 1} tool calls")
    items = []
    if message.get("content") is not None or message.get("refusal") is not None:
        items.append(message_item(message.get("content"), message.get("refusal"), item_id=new_id("msg_"),
                                  status=status))
    for call in message.get("tool_calls") or ():
        function = call["function"]
        items.append(call_item(call["id"], function["name"], function.get("arguments") or "",
                               item_id=new_id("fc_"), status=status))
    return items


def response_from_chat(request: dict[str, Any], completion: dict[str, Any], *, response_id: str,
                       created_at: int, model: str) -> dict[str, Any]:
    """The `response` answering `request`, from a (non-streamed) chat completion of one choice."""
    choice = completion["choices"][0]
    status, details = status_of(choice.get("finish_reason"))
    answer = shell(request, response_id=response_id, created_at=created_at, model=model, status=status)
    answer["incomplete_details"] = details
    answer["output"] = output_items(choice["message"], "completed" if status == "completed" else "incomplete")
    answer["usage"] = usage_from_chat(completion.get("usage"))
    return answer


def output_text(response: dict[str, Any]) -> str:
    """The response's text, its output_text parts joined (what the SDKs' `output_text` reads)."""
    return "".join(part["text"] for item in response["output"] if item["type"] == "message"
                   for part in item["content"] if part["type"] == "output_text")
