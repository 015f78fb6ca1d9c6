"""A fake Anthropic Messages API (`POST /v1/messages`) that checks each request against the
documented shape and records it.

Shapes follow Anthropic's API reference and SDK types (MessageCreateParams, Message, Usage,
StopReason; the streaming event flow message_start, content_block_start, ping,
content_block_delta/text_delta, content_block_stop, message_delta, message_stop, and `error`
events; the error body `{"type": "error", "error": {"type", "message"}}`), including rules that
bite gateways: the first message must be the user's, text content must not be empty, and a final
assistant (prefill) message must not end in whitespace. A request that breaks one is answered
400 invalid_request_error, as Anthropic would, and listed in `violations`.

The "model" writes tokens " w0", " w1", ... up to max_tokens, cut at the first stop sequence. The
model name selects faults:
  fail-<status>[-<s>]  that HTTP status with Anthropic's error body (quoting the x-api-key
                  header), with Retry-After: <s> when given
  refuse          stops with stop_reason "refusal" after one token
  cached          reports cache reads (7) and writes (3)
  stream-error    streams one delta, then an `error` event (overloaded_error)
  leak-stream-error  the same, its message quoting the x-api-key header
  leak-malformed  a message whose content is the x-api-key header (a string, not blocks)
  cut-stream      streams one delta, then closes without message_stop
"""

from __future__ import annotations

import json
from typing import Any

from tests.support.fakes.asgi import Recorder, end_events, read_request, send_event, send_json, start_events

VERSION = "2023-06-01"
_KEYS = {"model", "max_tokens", "messages", "stop_sequences", "temperature", "top_p", "top_k", "metadata", "stream",
         "system"}  # fmt: skip
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}  # fmt: skip


class FakeAnthropic(Recorder):
    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        headers, raw = await read_request(scope, receive)
        if scope["path"] != "/v1/messages" or scope["method"] != "POST":
            await _error(send, 404, f"no route {scope['method']} {scope['path']}")
            return
        body = json.loads(raw)
        self.requests.append({"path": scope["path"], "headers": headers, "body": body})
        problems = _problems(headers, body)
        if problems:
            self.violations.extend(problems)
            await _error(send, 400, "; ".join(problems))
            return
        model = body["model"]
        if model.startswith("fail-"):
            _, status_text, *retry_after = model.split("-")
            status = int(status_text)
            extra = [(b"retry-after", retry_after[0].encode())] if retry_after else []
            await _error(send, status, f"fake failure; key used: {headers.get('x-api-key')}", extra)
            return
        tokens, stop_reason, stop_sequence = generate(body)
        usage = _usage(body, len(tokens))
        if not body.get("stream"):
            content = [{"type": "text", "text": "".join(tokens)}]
            await send_json(send, 200, {
                "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
                "content": f"x-api-key: {headers['x-api-key']}" if model == "leak-malformed" else content,
                "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": usage,
            })  # fmt: skip
            return
        await start_events(send)
        start = {"id": "msg_fake", "type": "message", "role": "assistant", "content": [], "model": model,
                 "stop_reason": None, "stop_sequence": None, "usage": usage | {"output_tokens": 1}}
        await _event(send, {"type": "message_start", "message": start})
        await _event(send, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        await _event(send, {"type": "ping"})
        for i, token in enumerate(tokens):
            await _event(send, {"type": "content_block_delta", "index": 0,
                                "delta": {"type": "text_delta", "text": token}})
            if i == 0 and model in ("stream-error", "leak-stream-error"):
                message = "Overloaded" if model == "stream-error" else f"Overloaded; x-api-key {headers['x-api-key']}"
                await _event(send, {"type": "error", "error": {"type": "overloaded_error", "message": message}})
                await end_events(send)
                return
            if i == 0 and model == "cut-stream":
                await end_events(send)
                return
        await _event(send, {"type": "content_block_stop", "index": 0})
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        await _event(send, {"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage["output_tokens"]}})
        await _event(send, {"type": "message_stop"})
        await end_events(send)


def generate(body: dict[str, Any]) -> tuple[list[str], str, str | None]:
    """The reply's tokens, stop_reason and the stop sequence that ended it."""
    if body["model"] == "refuse":
        return [" w0"], "refusal", None
    tokens: list[str] = []
    for k in range(min(body["max_tokens"], 256)):
        text = "".join(tokens) + f" w{k}"
        hits = [(text.index(s), s) for s in body.get("stop_sequences", []) if s in text]
        if hits:
            at, stop = min(hits)
            kept = text[:at][len("".join(tokens)) :]
            return [*tokens, kept] if kept else tokens, "stop_sequence", stop
        tokens.append(f" w{k}")
    return tokens, "max_tokens", None


def _usage(body: dict[str, Any], output: int) -> dict[str, Any]:
    words = sum(len(m["content"].split()) for m in body["messages"])
    usage = {"input_tokens": words, "output_tokens": output, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}  # fmt: skip
    if body["model"] == "cached":
        usage |= {"cache_read_input_tokens": 7, "cache_creation_input_tokens": 3}
    return usage


def _problems(headers: dict[str, str], body: Any) -> list[str]:
    """Where a request breaks the Messages API's documented shape."""
    problems = []
    if not headers.get("x-api-key"):
        problems.append("x-api-key header missing")
    if headers.get("anthropic-version") != VERSION:
        problems.append(f"anthropic-version must be {VERSION}")
    if not headers.get("content-type", "").startswith("application/json"):
        problems.append("content-type must be application/json")
    if not isinstance(body, dict):
        return [*problems, "body must be an object"]
    if unknown := set(body) - _KEYS:
        problems.append(f"unknown fields {sorted(unknown)}")
    if not isinstance(body.get("model"), str) or not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 0:
        problems.append("model (string) and max_tokens (integer >= 0) are required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*problems, "messages: at least one message is required"]
    if messages[0].get("role") != "user":
        problems.append('messages: first message must use the "user" role')
    for i, message in enumerate(messages):
        if set(message) != {"role", "content"} or message["role"] not in ("user", "assistant"):
            problems.append(f"messages.{i}: role (user|assistant) and content only")
        elif not isinstance(message["content"], str) or not message["content"]:
            problems.append(f"messages.{i}: text content blocks must be non-empty")
        elif i and message["role"] == messages[i - 1]["role"]:
            problems.append(f"messages.{i}: roles must alternate")
    last = messages[-1].get("content")
    if messages[-1].get("role") == "assistant" and isinstance(last, str) and last != last.rstrip():
        problems.append("messages: final assistant content cannot end with trailing whitespace")
    stops = body.get("stop_sequences", [])
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        problems.append("stop_sequences must be a list of non-empty strings")
    for name in ("temperature", "top_p"):
        if name in body and not (isinstance(body[name], int | float) and 0 <= body[name] <= 1):
            problems.append(f"{name}: must be a number from 0 to 1")
    if "metadata" in body and (not isinstance(body["metadata"], dict) or set(body["metadata"]) - {"user_id"}):
        problems.append("metadata: only user_id")
    if "stream" in body and not isinstance(body["stream"], bool):
        problems.append("stream must be a boolean")
    return problems


async def _event(send, data: dict[str, Any]) -> None:
    await send_event(send, data, event=data["type"])


async def _error(send, status: int, message: str, extra=()) -> None:
    error_type = _ERROR_TYPES.get(status, "api_error")
    await send_json(send, status, {"type": "error", "error": {"type": error_type, "message": message}}, extra)
