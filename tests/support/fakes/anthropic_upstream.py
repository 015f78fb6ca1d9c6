"""A fake Anthropic Messages API (`POST /v1/messages`) that checks each request against the
documented shape and records it.

Shapes follow Anthropic's API reference and SDK types (MessageCreateParams, Message, Usage,
StopReason; the streaming event flow message_start, content_block_start, ping,
content_block_delta/text_delta, content_block_stop, message_delta, message_stop, and `error`
events; the error body `{"type": "error", "error": {"type", "message"}}`), including rules that
bite gateways: the first message must be the user's, text content must not be empty, and a final
assistant (prefill) message must not end in whitespace. A request that breaks one is answered
400 invalid_request_error, as Anthropic would, and listed in `violations`.

Chat requests bring the rest of the shape, checked too: `system` (a string or text blocks), content
as blocks (text, image with a base64 or url source, tool_use in assistant turns, tool_result in
user turns, first in the turn, each answering a tool_use of the turn before, and every tool_use
answered), `tools` (a name and an object `input_schema`), `tool_choice` (auto, any, none, or a
tool of `tools`, with `disable_parallel_tool_use`) and `top_k`.

Native requests (POST /v5/inference) bring prompt caching and extended thinking, checked as the
API reference has them: `cache_control` (`{"type": "ephemeral"}`, `ttl` "5m" or "1h") on system
blocks, content blocks and tools, at most 4 breakpoints; `thinking` (`{"type": "enabled",
"budget_tokens"}` from 1024 and below max_tokens, or `{"type": "disabled"}`), which takes no
`temperature` but 1 and no `top_k`; assistant turns may carry back `thinking` (with its `signature`)
and `redacted_thinking` blocks. A request with cache breakpoints reports the prefix up to the last
one as written to the cache (`cache_creation_input_tokens`); with thinking enabled, the answer
starts with a thinking block (streamed: thinking_delta then signature_delta).

The "model" writes tokens " w0", " w1", ... up to max_tokens, cut at the first stop sequence. Given
tools (and tool_choice not none) and no tool result in the last turn, it says "Let me look." (not
when the call is forced: tool_choice any or tool) and calls the named tool, or the first, with
{"said": <the last user turn's text>} instead; streamed,
the tool_use block's input comes in two input_json_delta fragments. The model name selects faults:
  fail-<status>[-<s>]  that HTTP status with Anthropic's error body (quoting the x-api-key
                  header), with Retry-After: <s> when given
  refuse          stops with stop_reason "refusal" after one token
  cached          reports cache reads (7) and writes (3)
  stream-error    streams one delta, then an `error` event (overloaded_error)
  leak-stream-error  the same, its message quoting the x-api-key header
  leak-malformed  a message whose content is the x-api-key header (a string, not blocks)
  cut-stream      streams one delta, then closes without message_stop
  two-tools       calls two tools (the first two of `tools`) when it calls one, unless parallel use is off
  off-schema      calls a tool with {"other": 1}
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.fakes.asgi import Recorder, end_events, read_request, send_event, send_json, start_events

VERSION = "2023-06-01"
_KEYS = {"model", "max_tokens", "messages", "stop_sequences", "temperature", "top_p", "top_k", "metadata", "stream",
         "system", "tools", "tool_choice", "thinking"}  # fmt: skip
_CACHE_TTLS = {"5m", "1h"}
MAX_BREAKPOINTS = 4
THOUGHT = "Considering the question."
_IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
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
        calls = tool_calls(body)
        # A forced call (tool_choice any or tool) comes without text, as Anthropic documents.
        forced = (body.get("tool_choice") or {}).get("type") in ("any", "tool")
        tokens, stop_reason, stop_sequence = ([] if forced else ["Let me look."], "tool_use", None) if calls \
            else generate(body)
        thinks = (body.get("thinking") or {}).get("type") == "enabled"
        usage = _usage(body, len(tokens) + 5 * len(calls) + (len(THOUGHT.split()) if thinks else 0))
        thought = [{"type": "thinking", "thinking": THOUGHT, "signature": "sig-fake"}] if thinks else []
        if not body.get("stream"):
            content = [*thought, *([{"type": "text", "text": "".join(tokens)}] if tokens or not calls else []), *calls]
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
        first = 0
        if thinks:
            await _event(send, {"type": "content_block_start", "index": 0,
                                "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
            await _event(send, {"type": "content_block_delta", "index": 0,
                                "delta": {"type": "thinking_delta", "thinking": THOUGHT}})
            await _event(send, {"type": "content_block_delta", "index": 0,
                                "delta": {"type": "signature_delta", "signature": "sig-fake"}})
            await _event(send, {"type": "content_block_stop", "index": 0})
            first = 1
        text_block = bool(tokens or not calls)  # a forced call's message starts with the tool_use block
        if text_block:
            await _event(send, {"type": "content_block_start", "index": first,
                                "content_block": {"type": "text", "text": ""}})
        await _event(send, {"type": "ping"})
        for i, token in enumerate(tokens):
            await _event(send, {"type": "content_block_delta", "index": first,
                                "delta": {"type": "text_delta", "text": token}})
            if i == 0 and model in ("stream-error", "leak-stream-error"):
                message = "Overloaded" if model == "stream-error" else f"Overloaded; x-api-key {headers['x-api-key']}"
                await _event(send, {"type": "error", "error": {"type": "overloaded_error", "message": message}})
                await end_events(send)
                return
            if i == 0 and model == "cut-stream":
                await end_events(send)
                return
        if text_block:
            await _event(send, {"type": "content_block_stop", "index": first})
        for index, call in enumerate(calls, start=first + int(text_block)):
            await _event(send, {"type": "content_block_start", "index": index, "content_block": call | {"input": {}}})
            arguments = json.dumps(call["input"])
            for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
                await _event(send, {"type": "content_block_delta", "index": index,
                                    "delta": {"type": "input_json_delta", "partial_json": piece}})
            await _event(send, {"type": "content_block_stop", "index": index})
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        await _event(send, {"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage["output_tokens"]}})
        await _event(send, {"type": "message_stop"})
        await end_events(send)


def generate(body: dict[str, Any]) -> tuple[list[str], str, str | None]:
    """The reply's tokens, stop_reason and the stop sequence that ended it."""
    if body["model"] == "refuse":
        return [" w0"], "refusal", None
    if body["model"] == "brief":  # a model that ends its turn (an agent's run stops at a completed answer)
        return [" done"], "end_turn", None
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


def tool_calls(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_use blocks the model answers with ([] for a text answer)."""
    tools, choice = body.get("tools") or [], body.get("tool_choice") or {"type": "auto"}
    last = body["messages"][-1]
    answered = isinstance(last["content"], list) and any(b["type"] == "tool_result" for b in last["content"])
    if not tools or choice["type"] == "none" or (answered and choice["type"] == "auto"):
        return []  # (a forced call, `any` or `tool`, is made whatever came before: the API forces it)
    names = [choice["name"]] if choice["type"] == "tool" else [tool["name"] for tool in tools][:1]
    if body["model"] == "two-tools" and choice["type"] != "tool" and not choice.get("disable_parallel_tool_use"):
        names = [tool["name"] for tool in tools][:2]
    said = _text(next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user"))
    given = {"other": 1} if body["model"] == "off-schema" else {"said": said}
    return [{"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": given} for i, name in enumerate(names)]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(block["text"] for block in content if block["type"] == "text")


def _usage(body: dict[str, Any], output: int) -> dict[str, Any]:
    system = body.get("system", "")
    words = sum(len(_text(m["content"]).split()) for m in body["messages"]) + len(_text(system).split())
    usage = {"input_tokens": words, "output_tokens": output, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}  # fmt: skip
    if body["model"] == "cached":
        usage |= {"cache_read_input_tokens": 7, "cache_creation_input_tokens": 3}
    elif _breakpoints(body):  # the prefix up to the last breakpoint is written to the cache
        cached = len(_text(system).split())
        usage |= {"cache_creation_input_tokens": cached, "input_tokens": words - cached}
    return usage


def _breakpoints(body: dict[str, Any]) -> list[Any]:
    """Every cache_control of the request: on tools, system blocks and content blocks."""
    blocks = [*(body.get("tools") or []), *(body["system"] if isinstance(body.get("system"), list) else []),
              *(block for m in body.get("messages") or [] if isinstance(m, dict) and isinstance(m.get("content"), list)
                for block in m["content"])]
    return [b["cache_control"] for b in blocks if isinstance(b, dict) and "cache_control" in b]


def _cache_problems(body: dict[str, Any]) -> list[str]:
    problems = []
    found = _breakpoints(body)
    for control in found:
        if not isinstance(control, dict) or control.get("type") != "ephemeral" or set(control) - {"type", "ttl"} \
                or control.get("ttl", "5m") not in _CACHE_TTLS:
            problems.append('cache_control: {"type": "ephemeral"} with an optional ttl of 5m or 1h')
    if len(found) > MAX_BREAKPOINTS:
        problems.append(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                        f"Found {len(found)}.")
    return problems


def _thinking_problems(body: dict[str, Any]) -> list[str]:
    if "thinking" not in body:
        return []
    thinking = body["thinking"]
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind == "disabled" and set(thinking) == {"type"}:
        return []
    if kind != "enabled" or set(thinking) != {"type", "budget_tokens"} \
            or not isinstance(thinking["budget_tokens"], int):
        return ['thinking: {"type": "enabled", "budget_tokens": n} or {"type": "disabled"}']
    problems = []
    if thinking["budget_tokens"] < 1024:
        problems.append("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
    if isinstance(body.get("max_tokens"), int) and body["max_tokens"] <= thinking["budget_tokens"]:
        problems.append("`max_tokens` must be greater than `thinking.budget_tokens`")
    if body.get("temperature", 1) != 1:
        problems.append("`temperature` may only be set to 1 when thinking is enabled")
    if "top_k" in body:
        problems.append("`top_k` is not supported when thinking is enabled")
    return problems


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
        # In Anthropic's words.
        problems.extend(f"{name}: Extra inputs are not permitted" for name in sorted(unknown))
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
        elif isinstance(message["content"], list):
            problems.extend(_block_problems(i, message, messages[i - 1] if i else None,
                                            messages[i + 1] if i + 1 < len(messages) else None))
        elif not isinstance(message["content"], str) or not message["content"]:
            problems.append(f"messages.{i}: text content blocks must be non-empty")
        if i and message.get("role") == messages[i - 1].get("role"):
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
    if "top_k" in body and not (isinstance(body["top_k"], int) and body["top_k"] >= 1):
        problems.append("top_k: an integer from 1")
    system = body.get("system", "")
    if not (isinstance(system, str) and (system.strip() or "system" not in body)) and not (
            isinstance(system, list) and all(isinstance(b, dict) and b.get("type") == "text"
                                             and isinstance(b.get("text"), str) and b["text"].strip()
                                             and not set(b) - {"type", "text", "cache_control"} for b in system)):
        problems.append("system: a string or text blocks, of non-whitespace text")
    return problems + _tool_problems(body) + _cache_problems(body) + _thinking_problems(body)


def _block_problems(i: int, message: dict[str, Any], before: dict[str, Any] | None,
                    after: dict[str, Any] | None) -> list[str]:
    """Where a turn's content blocks break the shape (and tool uses and results do not pair up)."""
    problems, blocks, role = [], message["content"], message["role"]
    if not blocks:
        return [f"messages.{i}: content must not be empty"]
    uses_before = {b.get("id") for b in before["content"] if b.get("type") == "tool_use"} \
        if before and isinstance(before["content"], list) else set()
    results_after = {b.get("tool_use_id") for b in after["content"] if b.get("type") == "tool_result"} \
        if after and isinstance(after["content"], list) else set()
    seen_other = False
    for j, block in enumerate(blocks):
        where, kind = f"messages.{i}.content.{j}", block.get("type") if isinstance(block, dict) else None
        if isinstance(block, dict) and "cache_control" in block:
            # Any block may carry one (checked by _cache_problems).
            block = {k: v for k, v in block.items() if k != "cache_control"}
        if kind == "thinking" and role == "assistant":
            if set(block) != {"type", "thinking", "signature"} or not isinstance(block.get("signature"), str):
                problems.append(f"{where}: a thinking block has thinking and its signature")
        elif kind == "redacted_thinking" and role == "assistant":
            if set(block) != {"type", "data"}:
                problems.append(f"{where}: a redacted_thinking block has data")
        elif kind == "text":
            if not isinstance(block.get("text"), str) or not block["text"].strip() or set(block) != {"type", "text"}:
                problems.append(f"{where}: text content blocks must contain non-whitespace text")
            elif after is None and role == "assistant" and j == len(blocks) - 1 \
                    and block["text"] != block["text"].rstrip():
                problems.append("messages: final assistant content cannot end with trailing whitespace")
        elif kind == "image" and role == "user":
            source = block.get("source") or {}
            if source.get("type") == "base64":
                if source.get("media_type") not in _IMAGE_TYPES or not isinstance(source.get("data"), str) \
                        or set(source) != {"type", "media_type", "data"}:
                    problems.append(f"{where}: a base64 image source needs a supported media_type and data")
            elif source.get("type") != "url" or not str(source.get("url", "")).startswith(("http://", "https://")) \
                    or set(source) != {"type", "url"}:
                problems.append(f"{where}: an image source is base64 or url")
        elif kind == "tool_use" and role == "assistant":
            if not block.get("id") or not _TOOL_NAME.match(str(block.get("name"))) \
                    or not isinstance(block.get("input"), dict) or set(block) != {"type", "id", "name", "input"}:
                problems.append(f"{where}: a tool_use needs an id, a name and an object input")
            elif block["id"] not in results_after:
                problems.append(f"{where}: tool_use ids were found without tool_result blocks immediately after")
        elif kind == "tool_result" and role == "user":
            if seen_other:
                problems.append(f"{where}: tool_result blocks must come first in the user turn")
            if block.get("tool_use_id") not in uses_before:
                problems.append(f"{where}: unexpected tool_use_id in tool_result blocks")
            if set(block) - {"type", "tool_use_id", "content", "is_error"} or \
                    not isinstance(block.get("content", "x"), str | list) or block.get("content", "x") == "" \
                    or (isinstance(block.get("content"), str) and not block["content"].strip()):
                problems.append(f"{where}: a tool_result has tool_use_id and content")
            continue
        else:
            problems.append(f"{where}: no {kind} block in a {role} turn")
        seen_other = True
    return problems


def _tool_problems(body: dict[str, Any]) -> list[str]:
    problems, tools = [], body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            return ["tools: a non-empty list"]
        for k, tool in enumerate(tools):
            schema = tool.get("input_schema") if isinstance(tool, dict) else None
            if not _TOOL_NAME.match(str(tool.get("name"))) or not isinstance(schema, dict) \
                    or schema.get("type") != "object" \
                    or set(tool) - {"name", "description", "input_schema", "cache_control"}:
                problems.append(f"tools.{k}: a name and an input_schema of type object")
    choice = body.get("tool_choice")
    if choice is not None:
        names = [tool.get("name") for tool in tools or ()]
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind not in ("auto", "any", "none", "tool") or not tools:
            problems.append("tool_choice: auto, any, none or tool, with tools")
        elif kind == "tool" and choice.get("name") not in names:
            problems.append("tool_choice.name: names no tool")
        allowed = {"type", "disable_parallel_tool_use"} | ({"name"} if kind == "tool" else set())
        if kind == "none":
            allowed = {"type"}
        if set(choice) - allowed or not isinstance(choice.get("disable_parallel_tool_use", False), bool):
            problems.append("tool_choice: unknown fields")
    return problems


async def _event(send, data: dict[str, Any]) -> None:
    await send_event(send, data, event=data["type"])


async def _error(send, status: int, message: str, extra=()) -> None:
    error_type = _ERROR_TYPES.get(status, "api_error")
    await send_json(send, status, {"type": "error", "error": {"type": error_type, "message": message}}, extra)
