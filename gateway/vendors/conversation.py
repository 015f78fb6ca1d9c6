"""OpenAI's chat messages as the turns of a vendor's own conversation shape: what the protocols
that translate them (vendors/anthropic/chat.py, vendors/gemini/chat.py) do alike.

Such vendors take the system's instructions apart from the conversation and want turns that
alternate between the user and the model; OpenAI's tool messages are the user's turn there. So
system and developer messages are joined into one instruction, and consecutive messages that
become turns of the same role are merged into one turn. They have no participant names, and an
assistant's tool call carries its arguments as an object.

The deprecated functions are OpenAI's tools of one call at a time (`with_tools`): `functions` are
tools, `function_call` a tool_choice, an assistant's `function_call` a tool call (with an id of
the gateway's, `fn_<message index>`) and a function message the tool message answering the
latest call of its function; the answer's one tool call is its `function_call` again
(`as_function_call`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import orjson

from gateway.core.chat import ChatCall, ChatChoice, content_text
from gateway.core.completion import Chunk, Result
from gateway.core.errors import VendorFailed
from gateway.vendors import untrusted as read


def system_and_turns(messages: list[dict[str, Any]], parts_of: Callable[[dict[str, Any]], list[dict[str, Any]]],
                     model_role: str, parts_key: str) -> tuple[str, list[dict[str, Any]]]:
    """The system's instruction (the system and developer messages' text, in their order, joined by
    blank lines) and the turns: each other message's parts (`parts_of`; a message with none is
    dropped) under `parts_key`, as a "user" turn or, for an assistant's, a `model_role` one."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role in ("system", "developer"):
            if (text := content_text(message["content"])).strip():
                system.append(text)
            continue
        parts = parts_of(message)
        if not parts:
            continue
        turn_role = model_role if role == "assistant" else "user"
        if turns and turns[-1]["role"] == turn_role:
            turns[-1][parts_key].extend(parts)
        else:
            turns.append({"role": turn_role, parts_key: parts})
    return "\n\n".join(system), turns


def arguments(text: str) -> Any:
    """A tool call's arguments as JSON (an empty text: no arguments), or None when they are not JSON."""
    try:
        return orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return None


def arguments_text(given: dict[str, Any]) -> str:
    """A vendor's tool call input (an object) as OpenAI's JSON `arguments`; untrusted.Malformed when
    it cannot be written as JSON (an integer beyond 64 bits, which JSON readers differ on)."""
    try:
        return orjson.dumps(given).decode()
    except TypeError:
        raise read.Malformed("a tool call's input cannot be written as JSON") from None


def refused(messages: list[dict[str, Any]], api: str, image_problem: Callable[[str], str | None],
            problem: Callable[[dict[str, Any]], str | None] = lambda message: None) -> tuple[str, str] | None:
    """The first message `api` cannot be given, as ("messages", why), or None: a participant's name,
    a function message, an image `image_problem` objects to, a tool call whose arguments are not a
    JSON object, or what `problem` (the protocol's own rule, shown each message in turn) finds."""
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if message["role"] == "function":  # (left by with_tools: a function message's `name` is the function's)
            return "messages", f"{where}: a function message answering no earlier function_call"
        if message.get("name") is not None:
            return "messages", f"{where}.name: {api} has no participant names"
        parts = message.get("content") if isinstance(message.get("content"), list) else ()
        for part in parts:
            if part.get("type") == "image_url" and (why := image_problem(part["image_url"]["url"])):
                return "messages", f"{where}: {why}"
        for tool_call in message.get("tool_calls") or ():
            if not isinstance(arguments(tool_call["function"]["arguments"]), dict):
                return "messages", f"{where}: a tool call's arguments must be a JSON object for {api}"
        if why := problem(message):
            return "messages", f"{where}: {why}"
    return None


def first_image(messages: list[dict[str, Any]]) -> str | None:
    """Where the conversation's first image part stands (`messages[i].content[j]`), or None: what a
    model that reads text only refuses by name."""
    for i, message in enumerate(messages):
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if part.get("type") == "image_url":
                return f"messages[{i}].content[{j}]"
    return None


def uses_functions(call: ChatCall) -> bool:
    """Whether the call speaks the deprecated functions (endpoints/chat/rules.py: never with tools)."""
    return call.parameters.get("functions") is not None or call.parameters.get("function_call") is not None or \
        any(m["role"] == "function" or m.get("function_call") is not None for m in call.messages)


def with_tools(call: ChatCall) -> ChatCall:
    """The call with the deprecated functions as tools of one call at a time (itself without them)."""
    if not uses_functions(call):
        return call
    given = call.parameters
    parameters = {name: value for name, value in given.items() if name not in ("functions", "function_call")}
    if given.get("functions"):
        parameters["tools"] = [{"type": "function", "function": function} for function in given["functions"]]
        parameters["parallel_tool_calls"] = False
    choice = given.get("function_call")
    if choice is not None:
        parameters["tool_choice"] = choice if isinstance(choice, str) else \
            {"type": "function", "function": {"name": choice["name"]}}
    messages, unanswered = [], {}  # a function's name: the id of its latest call not answered yet
    for i, message in enumerate(call.messages):
        if message["role"] == "assistant" and message.get("function_call") is not None:
            unanswered[message["function_call"]["name"]] = call_id = f"fn_{i}"
            message = {name: value for name, value in message.items() if name != "function_call"} | {
                "tool_calls": [{"id": call_id, "type": "function", "function": message["function_call"]}]}
        elif message["role"] == "function" and message["name"] in unanswered:
            message = {"role": "tool", "tool_call_id": unanswered.pop(message["name"]),
                       "content": message.get("content") or ""}
        messages.append(message)
    return dataclasses.replace(call, messages=messages, parameters=parameters)


def as_function_call(choice: ChatChoice) -> None:
    """A choice (or a stream's piece of one) of a call that spoke the deprecated functions: its tool
    call as its `function_call`; untrusted.Malformed for more than one, which that cannot carry."""
    calls = choice.tool_calls
    if choice.finish_reason == "tool_calls":
        choice.finish_reason = "function_call"
    if not calls:
        return
    if len(calls) > 1 or calls[0].get("index", 0) != 0:
        raise read.Malformed("called several functions at once, which the deprecated function_call cannot carry")
    choice.function_call = dict(calls[0]["function"])
    choice.tool_calls = None


def function_call_result(vendor: str, result: Result) -> Result:
    """A whole answer to the deprecated functions (as_function_call), or the vendor's failure."""
    try:
        for choice in result.choices:
            as_function_call(choice)  # type: ignore[arg-type]
    except read.Malformed as exc:
        raise VendorFailed(f"vendor '{vendor}' {exc}", vendor=vendor) from None
    return result


async def function_call_chunks(vendor: str, batches: AsyncIterator[list[Chunk]]) -> AsyncIterator[list[Chunk]]:
    """A stream's chunks of an answer to the deprecated functions (as_function_call)."""
    async with aclosing(batches):  # type: ignore[type-var]
        async for batch in batches:
            try:
                for chunk in batch:
                    for choice in chunk.choices:
                        as_function_call(choice)  # type: ignore[arg-type]
            except read.Malformed as exc:
                raise VendorFailed(f"vendor '{vendor}' {exc}", vendor=vendor) from None
            yield batch
