"""OpenAI's chat messages as the turns of a vendor's own conversation shape: what the protocols
that translate them (vendors/anthropic_chat.py, vendors/gemini_chat.py) do alike.

Such vendors take the system's instructions apart from the conversation and want turns that
alternate between the user and the model; OpenAI's tool messages are the user's turn there. So
system and developer messages are joined into one instruction, and consecutive messages that
become turns of the same role are merged into one turn. They have no participant names and no
deprecated function messages, and an assistant's tool call carries its arguments as an object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway.core.chat import content_text
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
        if message["role"] == "function":  # (a function message's `name` is the function's)
            return "messages", f"{where}: function messages (the deprecated functions) are not mapped; use tools"
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
