"""The fake OpenAI server's `POST /v1/responses` (tests/support/fakes/openai_upstream.py routes to
it), speaking OpenAI's Responses wire format, plain and streamed.

It checks the request as OpenAI does, answering a 400 in OpenAI's error shape naming what is wrong:
a field OpenAI's Responses API does not take ("Unrecognized request argument supplied"), a
chat-shaped tool (`{"type": "function", "function": {...}}`: Responses tools are flat), an `id` on
a user's, system's or developer's input message (OpenAI's input message has none), a non-integer
`max_output_tokens`, `stream_options` without `stream`, a `function_call_output` whose `call_id`
no `function_call` of the input made (so a gateway that rewrites call ids fails here as on
OpenAI), and any `previous_response_id` (404: this fake stores nothing, so a gateway that keeps
conversations itself must send the whole input). Deterministic answers: the text " w0 w1 ..." up to
`max_output_tokens` (default 8; reaching it is `incomplete`, `max_output_tokens`), or, with function
tools and `tool_choice` not "none", one `function_call` of the first tool (or the one named) with
arguments `{"said": <the last user text>}` (unless the input ends with a call's output and nothing
forces another call: then it answers from it, as a model does). A stream is OpenAI's event sequence with `event:` names
and `sequence_number`s, ending with exactly one terminal event and no `[DONE]`; model `cut-stream`
stops after the first text delta without a terminal event; model `no-usage` reports no usage; model `ignores-tools` answers text whatever the tools and `tool_choice`, and `ignores-format` words
whatever `text.format` (as a server that takes them and ignores them would).
"""

from __future__ import annotations

import json
from typing import Any

# OpenAI's Responses create parameters (openai-python types/responses/response_create_params.py).
FIELDS = frozenset({
    "background", "conversation", "include", "input", "instructions", "max_output_tokens", "max_tool_calls",
    "metadata", "model", "parallel_tool_calls", "previous_response_id", "prompt", "prompt_cache_key",
    "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "store", "stream",
    "stream_options", "temperature", "text", "tool_choice", "tools", "top_logprobs", "top_p", "truncation", "user"})
ITEM_TYPES = {"message", "function_call", "function_call_output", "reasoning", "item_reference"}
ROLES = {"user", "assistant", "system", "developer"}
REASONING_TOKENS = 3  # what model `reasons` thinks before it answers


def error(message: str, param: str | None = None, status: int = 400, code: str | None = None) -> tuple[int, dict]:
    return status, {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


def wire_problem(request: dict[str, Any]) -> tuple[int, dict] | None:
    """OpenAI's refusal of `request`, or None."""
    if unknown := sorted(set(request) - FIELDS):
        return error(f"Unrecognized request argument supplied: {', '.join(unknown)}")
    for name in ("model", "input"):
        if name not in request:
            return error(f"Missing required parameter: '{name}'.", name)
    if request.get("previous_response_id") is not None:
        return error(f"Previous response with id '{request['previous_response_id']}' not found.",
                     "previous_response_id", 404, "previous_response_not_found")
    if request.get("max_output_tokens") is not None and type(request["max_output_tokens"]) is not int:
        return error("Invalid type for 'max_output_tokens': expected an integer.", "max_output_tokens")
    if request.get("stream_options") is not None and not request.get("stream"):
        return error("stream_options may only be set when stream is true.", "stream_options")
    for i, tool in enumerate(request.get("tools") or ()):
        if tool.get("type") == "function" and not tool.get("name"):
            return error(f"Missing required parameter: 'tools[{i}].name'.", f"tools[{i}].name")
    shape = (request.get("text") or {}).get("format") or {}
    if shape.get("type") == "json_schema" and not (shape.get("name") and isinstance(shape.get("schema"), dict)):
        return error("Missing required parameter: 'text.format.name' or 'text.format.schema'.", "text.format")
    items = request["input"] if isinstance(request["input"], list) else []
    if not isinstance(request["input"], (str, list)):
        return error("Invalid type for 'input': expected a string or an array.", "input")
    calls = set()
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind not in ITEM_TYPES:
            return error(f"Invalid value: '{kind}'.", f"input[{i}].type")
        if kind == "message" and item.get("role") not in ROLES:
            return error(f"Invalid value: '{item.get('role')}'.", f"input[{i}].role")
        if kind == "message" and item.get("role") != "assistant" and "id" in item:  # only listed items have one
            return error(f"Unknown parameter: 'input[{i}].id'.", f"input[{i}].id")
        if kind == "reasoning" and request.get("store") is False and not item.get("encrypted_content"):
            return error(f"Item with id '{item.get('id')}' not found. Items are not persisted when `store` is set to "
                         "false. Try again with `store` set to true, or remove this item from your input.",
                         f"input[{i}]", 404)
        if kind == "function_call":
            calls.add(item.get("call_id"))
        if kind == "function_call_output" and item.get("call_id") not in calls:
            return error(f"No tool call found for function call output with call_id {item.get('call_id')}.",
                         f"input[{i}]")
    return None


def _said(request: dict[str, Any]) -> str:
    given = request["input"]
    if isinstance(given, str):
        return given
    for item in reversed(given):
        if item.get("type", "message") == "message" and item.get("role") == "user":
            content = item["content"]
            return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
    return ""


def _call(request: dict[str, Any]) -> dict[str, Any] | None:
    tools = [t for t in request.get("tools") or () if t.get("type") == "function"]
    choice = request.get("tool_choice")
    answered = isinstance(request["input"], list) and bool(request["input"]) and \
        request["input"][-1].get("type") == "function_call_output"
    if not tools or choice == "none" or request["model"] == "ignores-tools" or (answered and choice in (None, "auto")):
        return None
    name = choice["name"] if isinstance(choice, dict) else tools[0]["name"]
    return {"type": "function_call", "id": "fc_fake0", "call_id": "call_fake0", "name": name,
            "arguments": json.dumps({"said": _said(request)}), "status": "completed"}


def _usage(request: dict[str, Any], generated: int, reasoning: int = 0) -> dict[str, Any]:
    given = request["input"]
    prompt = len(given.split()) + 1 if isinstance(given, str) else sum(len(json.dumps(i).split()) for i in given)
    prompt += len((request.get("instructions") or "").split())
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": generated, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + generated}


def _shell(request: dict[str, Any], status: str) -> dict[str, Any]:
    return {"id": "resp_fake", "object": "response", "created_at": 1, "status": status, "background": False,
            "error": None, "incomplete_details": None, "instructions": request.get("instructions"),
            "max_output_tokens": request.get("max_output_tokens"), "model": request["model"], "output": [],
            "parallel_tool_calls": request.get("parallel_tool_calls", True), "previous_response_id": None,
            "reasoning": request.get("reasoning") or {"effort": None, "summary": None},
            "store": request.get("store", True), "temperature": request.get("temperature", 1.0),
            "text": request.get("text") or {"format": {"type": "text"}},
            "tool_choice": request.get("tool_choice", "auto"),
            "tools": request.get("tools") or [], "top_p": request.get("top_p", 1.0),
            "truncation": request.get("truncation", "disabled"), "usage": None, "user": request.get("user"),
            "metadata": request.get("metadata") or {}}


def _words(request: dict[str, Any]) -> list[str]:
    """The answer's text, a token per piece: `{"said": <the last user text>}` in three pieces when
    `text.format` asks for JSON, else words; up to max_output_tokens."""
    most = request.get("max_output_tokens") or 8
    asks_json = ((request.get("text") or {}).get("format") or {}).get("type") in ("json_object", "json_schema")
    if asks_json and request["model"] != "ignores-format":
        return ['{"said"', f": {json.dumps(_said(request))}", "}"][:most]
    return [f" w{i}" for i in range(most)]


def respond(request: dict[str, Any]) -> dict[str, Any]:
    """The whole response to `request`."""
    call = _call(request)
    words = [] if call else _words(request)
    cut = not call and request.get("max_output_tokens") is not None and len(words) == request["max_output_tokens"]
    answer = _shell(request, "incomplete" if cut else "completed")
    if cut:
        answer["incomplete_details"] = {"reason": "max_output_tokens"}
    answer["output"] = [call] if call else [
        {"type": "message", "id": "msg_fake0", "role": "assistant", "status": "incomplete" if cut else "completed",
         "content": [{"type": "output_text", "text": "".join(words), "annotations": [], "logprobs": []}]}]
    reasoning = REASONING_TOKENS if request["model"] == "reasons" else 0
    if reasoning:  # its reasoning first, its state opaque (handed back only when `include` asked for it)
        state = "opaque-state" if "reasoning.encrypted_content" in (request.get("include") or ()) else None
        answer["output"].insert(0, {"type": "reasoning", "id": "rs_fake0", "status": "completed",
                                    "summary": [{"type": "summary_text", "text": "thought it over"}],
                                    "encrypted_content": state})
    answer["usage"] = None if request["model"] == "no-usage" else _usage(
        request, len(words) + (1 if call else 0) + reasoning, reasoning)
    return answer


def events(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream of `request`: OpenAI's events, each with its sequence_number."""
    whole = respond(request)
    out: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        out.append({"type": kind, "sequence_number": len(out), **fields})

    emit("response.created", response=_shell(request, "in_progress"))
    emit("response.in_progress", response=_shell(request, "in_progress"))
    for index, item in enumerate(whole["output"]):
        if item["type"] == "reasoning":
            emit("response.output_item.added", output_index=index, item=item | {"summary": [], "status": "in_progress"})
        elif item["type"] == "function_call":
            emit("response.output_item.added", output_index=index,
                 item=item | {"arguments": "", "status": "in_progress"})
            half = len(item["arguments"]) // 2
            for piece in (item["arguments"][:half], item["arguments"][half:]):
                emit("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=piece)
            emit("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                 arguments=item["arguments"], name=item["name"])
        else:
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            emit("response.output_item.added", output_index=index, item=item | {"status": "in_progress", "content": []})
            emit("response.content_part.added", **where, part={"type": "output_text", "text": "", "annotations": [],
                                                                "logprobs": []})
            for word in _words(request):
                emit("response.output_text.delta", **where, delta=word, logprobs=[])
                if request["model"] == "cut-stream":
                    return out
            part = item["content"][0]
            emit("response.output_text.done", **where, text=part["text"], logprobs=[])
            emit("response.content_part.done", **where, part=part)
        emit("response.output_item.done", output_index=index, item=item)
    emit(f"response.{whole['status']}", response=whole)
    return out


def sse(stream: list[dict[str, Any]]) -> bytes:
    """The events on the wire, as OpenAI sends them: `event: <type>` then the JSON; no [DONE]."""
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in stream)
