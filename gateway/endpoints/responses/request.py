"""A Responses request to what a chat-completions vendor takes: its items to chat messages, its
fields to chat's, and everything chat cannot carry refused by name (`Refused`), never dropped.

The table of which field goes where is docs/responses.md; this module is its one implementation.
Call ids cross unchanged both ways (a `function_call`'s `call_id` is the chat tool call's `id`, and
a `function_call_output`'s is the tool message's `tool_call_id`): Anthropic and others match a tool
result to its call by that id, so an id rewritten on the way breaks the next turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.core.errors import UnsupportedParameter

# Tool types the vendor runs itself (OpenAI's built-in tools): no chat vendor runs them for us.
FUNCTION = "function"
# Fields the gateway itself serves, never sent to the vendor: `store` and `previous_response_id`
# (the stored conversation), `metadata` (kept with the stored response and echoed), `stream`
# (the vendor is streamed or not as the client asked, by the caller), `model` (the caller's).
GATEWAY_FIELDS = frozenset({"model", "input", "store", "previous_response_id", "metadata", "stream"})
# Request fields that map one to one.
SAME = ("temperature", "top_p", "parallel_tool_calls", "user")


class Refused(Exception):
    """A field (or value) of the request chat cannot carry: a 400 naming `param` once the vendor
    is known (`error`)."""

    def __init__(self, param: str, why: str) -> None:
        super().__init__(f"{param}: {why}")
        self.param, self.why = param, why

    def error(self, vendor: str) -> UnsupportedParameter:
        """The gateway's 400 (`unsupported_parameter`) naming the field and `vendor`."""
        return UnsupportedParameter(self.param, vendor, self.why)


def input_items(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's `input` as items: a string is one user message (as OpenAI lists it)."""
    given = request["input"]
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": given}]}]
    return list(given)


def conversation_text(instructions: str | None, items: Sequence[dict[str, Any]]) -> str:
    """The conversation's text, as an estimate of its prompt counts it: the instructions, then each
    item's text, a call's arguments and a call output's."""
    pieces = [instructions or ""]
    for item in items:
        content = item.get("content")
        if isinstance(content, str):
            pieces.append(content)
        elif isinstance(content, list):
            pieces += [part.get("text") or "" for part in content if isinstance(part, dict)]
        for key in ("arguments", "output"):
            if isinstance(item.get(key), str):
                pieces.append(item[key])
    return "\n".join(pieces)


def chat_request(request: dict[str, Any], history: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The chat-completions body for `request`, continuing the stored conversation `history` (its
    items, oldest first, as the store's `chain` gives them). Instructions come first, as a system
    message; the history's own instructions are not carried over (OpenAI's rule). Raises
    `Refused` for the first field chat cannot carry."""
    messages = []
    if request.get("instructions") is not None:
        messages.append({"role": "system", "content": request["instructions"]})
    messages += chat_messages(list(history), "previous_response_id")
    messages += chat_messages(input_items(request), "input")
    if not messages:
        raise Refused("input", "there is no message to answer: the input is empty")
    body: dict[str, Any] = {"model": request["model"], "messages": messages}
    for name in SAME:
        if request.get(name) is not None:
            body[name] = request[name]
    if request.get("max_output_tokens") is not None:
        body["max_completion_tokens"] = request["max_output_tokens"]
    if request.get("tools"):
        body["tools"] = [chat_tool(tool, f"tools[{i}]") for i, tool in enumerate(request["tools"])]
    if request.get("tool_choice") is not None:
        body["tool_choice"] = chat_tool_choice(request["tool_choice"])
    body |= _text(request.get("text"))
    body |= _reasoning(request.get("reasoning"))
    for i, value in enumerate(request.get("include") or ()):
        raise Refused(f"include[{i}]", f"'{value}' is not produced through chat completions")
    if request.get("truncation") not in (None, "disabled"):
        raise Refused("truncation", "'auto' truncation (dropping items to fit the context) is not done through chat "
                                    "completions; send fewer items, or leave it 'disabled'")
    if request.get("stream"):
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}  # usage is always read from the stream's end
    unknown = sorted(set(request) - GATEWAY_FIELDS - set(SAME) - {
        "instructions", "max_output_tokens", "tools", "tool_choice", "text", "reasoning", "include", "truncation"})
    if unknown:
        raise Refused(unknown[0], "not a field of the Responses API the gateway knows")
    return body


def chat_tool(tool: dict[str, Any], where: str) -> dict[str, Any]:
    """A function tool as chat's; a built-in tool refused by its type."""
    if tool.get("type") != FUNCTION:
        raise Refused(where, f"the built-in tool '{tool.get('type')}' is not run by this vendor; "
                             "only function tools are served")
    function = {"name": tool["name"]}
    for name in ("description", "parameters", "strict"):
        if tool.get(name) is not None:
            function[name] = tool[name]
    return {"type": "function", "function": function}


def chat_tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice["name"]}}


def _text(text: dict[str, Any] | None) -> dict[str, Any]:
    if not text:
        return {}
    if text.get("verbosity") is not None:
        raise Refused("text.verbosity", "chat completions have no verbosity")
    shape = text.get("format")
    if shape is None or shape["type"] == "text":
        return {}  # plain text is what chat answers anyway
    if shape["type"] == "json_object":
        return {"response_format": {"type": "json_object"}}
    schema = {name: shape[name] for name in ("name", "schema", "description", "strict") if shape.get(name) is not None}
    return {"response_format": {"type": "json_schema", "json_schema": schema}}


def _reasoning(reasoning: dict[str, Any] | None) -> dict[str, Any]:
    if not reasoning:
        return {}
    for name in ("summary", "generate_summary"):
        if reasoning.get(name) is not None:
            raise Refused(f"reasoning.{name}", "chat completions return no reasoning summary")
    return {"reasoning_effort": reasoning["effort"]} if reasoning.get("effort") is not None else {}


def chat_messages(items: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """Items as chat messages, in order. A run of `function_call` items becomes one assistant
    message's `tool_calls`, joined to the assistant message just before it when there is one
    (chat's shape of "said this, then called these"); reasoning items are opaque state of the
    vendor that made them, which chat has no place for: they stay stored, and are not sent."""
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        at = f"{where}[{i}]"
        if kind == "message":
            messages.append(_message(item, at))
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": _tool_output(item["output"], f"{at}.output")})
        elif kind != "reasoning":
            raise Refused(f"{at}.type", f"an input item of type '{kind}' is not served")
    return messages


def _message(item: dict[str, Any], at: str) -> dict[str, Any]:
    role, content = item["role"], item["content"]
    if isinstance(content, str):
        return {"role": role, "content": content}
    if role == "assistant":
        texts = [part["text"] for part in content if part["type"] in ("output_text", "input_text")]
        refusals = [part["refusal"] for part in content if part["type"] == "refusal"]
        for j, part in enumerate(content):
            if part["type"] not in ("output_text", "input_text", "refusal"):
                raise Refused(f"{at}.content[{j}]", f"an assistant message cannot hold a '{part['type']}' part")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
        if refusals:
            message["refusal"] = "".join(refusals)
        return message
    refuse_files(content, f"{at}.content")
    parts = [_part(part, role, f"{at}.content[{j}]") for j, part in enumerate(content)]
    return {"role": role, "content": parts}


def refuse_files(parts: Any, at: str) -> None:
    """`Refused` for a part that names a file, on every vendor: the gateway keeps no files and
    fetches none, and a file id would name one of the vendor account's files, which every account
    of the gateway shares."""
    for j, part in enumerate(parts if isinstance(parts, list) else ()):
        if part.get("type") == "input_image" and part.get("file_id") is not None:
            raise Refused(f"{at}[{j}].file_id", "the gateway keeps no files: send the image by URL or as a data: URL")
        if part.get("type") == "input_file":
            raise Refused(f"{at}[{j}]", "file inputs are not served: the gateway keeps and fetches no files")


def _part(part: dict[str, Any], role: str, at: str) -> dict[str, Any]:
    kind = part["type"]
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": part["text"]}
    if kind == "input_image" and role == "user":
        if not part.get("image_url"):
            raise Refused(f"{at}.image_url", "an image needs its URL or a data: URL")
        image = {"url": part["image_url"]}
        if part.get("detail") is not None:
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    raise Refused(at, f"a '{role}' message cannot hold a '{kind}' part through chat completions")


def _tool_output(output: str | list[dict[str, Any]], at: str) -> str | list[dict[str, Any]]:
    if isinstance(output, str):
        return output
    parts = []
    for j, part in enumerate(output):
        if part["type"] != "input_text":
            raise Refused(f"{at}[{j}]", f"a function's output cannot hold a '{part['type']}' part through chat "
                                        "completions (text only)")
        parts.append({"type": "text", "text": part["text"]})
    return parts
