"""The fake OpenAI server's `/v1/chat/completions` (tests/support/fakes/openai_upstream.py routes to it).

It checks the request against OpenAI's chat shape (a 400 naming what is wrong, as OpenAI would:
integers written as JSON integers, not both `max_tokens` and `max_completion_tokens`)
and answers deterministically: choice i says " w0 w1 ..." up to max_tokens (default 8), cut at
the first stop sequence, or `{"said": <the last user message>}` in three pieces when
`response_format` asks for JSON; with tools (and tool_choice not "none") it calls the first tool, or
the one named, with `{"said": <the last user message>}`, and likewise with the deprecated
`functions` (and function_call not "none") it answers a `function_call`. Model `bad-args` calls it
with arguments that are not JSON. A stream sends the role first, a word per chunk, a tool call's id and name once and
then its arguments in two pieces, one finish_reason per choice, then the usage (always asked for
by the gateway) and [DONE].
"""

from __future__ import annotations

import json
from typing import Any

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
INTEGERS = ("n", "max_tokens", "max_completion_tokens", "top_logprobs", "seed", "top_k")


def wire_problem(request: dict[str, Any]) -> str | None:
    """What is wrong with a chat request on OpenAI's wire, or None."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list"
    for i, message in enumerate(messages):
        if message.get("role") not in ROLES:
            return f"messages[{i}].role is invalid"
        if message["role"] == "tool" and not message.get("tool_call_id"):
            return f"messages[{i}].tool_call_id is required"
    if "x-openai-api-key" in request:
        return "unknown parameter x-openai-api-key"
    for name in INTEGERS:
        if request.get(name) is not None and type(request[name]) is not int:
            return f"Invalid type for '{name}': expected an integer, but got a decimal number instead."
    if request.get("max_tokens") is not None and request.get("max_completion_tokens") is not None:
        return "Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported."
    if request.get("stream") and request.get("stream_options") != {"include_usage": True}:
        return "the gateway must ask for usage in a stream"
    for tool in request.get("tools") or ():
        if tool.get("type") != "function" or not tool.get("function", {}).get("name"):
            return "tools[].function.name is required"
    return None


# The most words a choice says before it stops by itself, as a model ends its turn: a fuzzed
# max_tokens of 2**31 would otherwise keep the fake writing past the gateway's first-byte timeout.
MAX_WORDS = 4096


def _words(request: dict[str, Any], choice: int) -> list[str]:
    limit = request.get("max_completion_tokens") or request.get("max_tokens") or 8
    words = [f" w{i}" for i in range(min(limit, MAX_WORDS))]
    stops = request.get("stop") or []
    stops = [stops] if isinstance(stops, str) else stops
    text = "".join(words)
    for stop in stops:
        if stop in text:
            text = text[: text.index(stop)]
            return [w for w in words if w in text][: len(text.split())] or []
    return words


def _json(request: dict[str, Any]) -> bool:
    return (request.get("response_format") or {}).get("type") in ("json_object", "json_schema")


def _pieces(request: dict[str, Any], choice: int) -> list[str]:
    """A choice's content, a token per piece: JSON when response_format asks for it, else words."""
    if _json(request):
        limit = request.get("max_completion_tokens") or request.get("max_tokens") or 8
        return ['{"said"', f": {json.dumps(_said(request))}", "}"][:limit]
    return _words(request, choice)


def _said(request: dict[str, Any]) -> str:
    said = next((m.get("content") for m in reversed(request["messages"]) if m["role"] == "user"), "")
    return said if isinstance(said, str) else " ".join(p.get("text", "") for p in said if isinstance(p, dict))


def _function_call(request: dict[str, Any]) -> dict[str, Any] | None:
    """The deprecated function call answered to `functions` (with function_call not "none")."""
    functions, choice = request.get("functions") or [], request.get("function_call")
    if not functions or choice == "none":
        return None
    name = choice["name"] if isinstance(choice, dict) else functions[0]["name"]
    return {"name": name, "arguments": json.dumps({"said": _said(request)})}


def _tool_call(request: dict[str, Any]) -> dict[str, Any] | None:
    tools = request.get("tools") or []
    choice = request.get("tool_choice")
    if not tools or choice == "none" or request.get("model") == "ignores-tool-choice":  # (llama.cpp's server does)
        return None
    name = choice["function"]["name"] if isinstance(choice, dict) else tools[0]["function"]["name"]
    arguments = "{not json" if request.get("model") == "bad-args" else json.dumps({"said": _said(request)})
    return {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}


def _usage(request: dict[str, Any], generated: int) -> dict[str, Any]:
    prompt = sum(len(str(m.get("content") or "").split()) + 1 for m in request["messages"])
    return {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}


def _logprobs(request: dict[str, Any], words: list[str]) -> dict[str, Any] | None:
    if not request.get("logprobs"):
        return None
    k = request.get("top_logprobs") or 0
    return {"content": [{"token": w, "logprob": -0.5, "bytes": list(w.encode()),
                         "top_logprobs": [{"token": w, "logprob": -0.5, "bytes": list(w.encode())}][:k]
                         + [{"token": f" x{j}", "logprob": -1.0 - j, "bytes": None} for j in range(1, k)]}
                        for w in words], "refusal": None}


def chat(request: dict[str, Any], one_task_usage: bool = False) -> dict[str, Any]:
    """The answer; with `one_task_usage`, its usage counts the first choice only (llama.cpp's server)."""
    n = request.get("n") or 1
    choices, generated = [], 0
    call = _tool_call(request)
    function = None if call else _function_call(request)
    for i in range(n):
        words = [] if call or function else _pieces(request, i)
        generated += (len(words) + (1 if call or function else 0)) if i == 0 or not one_task_usage else 0
        limit = request.get("max_completion_tokens") or request.get("max_tokens") or 8
        cut = len(words) < 3 if _json(request) else len(words) == limit
        finish = "tool_calls" if call else "function_call" if function else ("length" if cut else "stop")
        message: dict[str, Any] = {"role": "assistant", "content": None if call or function else "".join(words),
                                   "refusal": None}
        if call:
            message["tool_calls"] = [call]
        if function:
            message["function_call"] = function
        choices.append({"index": i, "message": message, "finish_reason": finish,
                        "logprobs": _logprobs(request, words)})
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": request["model"],
            "choices": choices, "usage": _usage(request, generated), "system_fingerprint": "fp_fake"}


def chat_events(request: dict[str, Any], one_task_usage: bool = False) -> list[dict[str, Any]]:
    """The chunks of a streamed answer (each one a data event), before [DONE]."""
    head = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": request["model"]}
    whole = chat(request, one_task_usage)
    events = []
    for choice in whole["choices"]:
        i, message = choice["index"], choice["message"]
        events.append(head | {"choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                           "finish_reason": None}]})
        for word in _pieces(request, i) if message["content"] else []:
            events.append(head | {"choices": [{"index": i, "delta": {"content": word}, "finish_reason": None,
                                               "logprobs": _logprobs(request, [word])}]})
        if message.get("function_call"):
            events.append(head | {"choices": [{"index": i, "delta": {"function_call": message["function_call"]},
                                               "finish_reason": None}]})
        for call in message.get("tool_calls") or ():
            arguments = call["function"]["arguments"]
            events.append(head | {"choices": [{"index": i, "delta": {"tool_calls": [
                {"index": 0, "id": call["id"], "type": "function",
                 "function": {"name": call["function"]["name"], "arguments": ""}}]}, "finish_reason": None}]})
            for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2:]):
                events.append(head | {"choices": [{"index": i, "delta": {"tool_calls": [
                    {"index": 0, "function": {"arguments": piece}}]}, "finish_reason": None}]})
        events.append(head | {"choices": [{"index": i, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    events.append(head | {"choices": [], "usage": whole["usage"]})
    return events
