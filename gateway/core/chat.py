"""The vendor-neutral types of a chat completion: one vendor call (`ChatCall`) and a choice of its
answer (`ChatChoice`). What comes back otherwise is completion.py's: a `Result` of choices, a
stream's `Chunk`s, `Usage`.

A chat call carries the request as the contract wrote it (the validated JSON body, OpenAI's
shape): the OpenAI protocol passes it on nearly as it is, the other protocols translate it. Only
what the planner decided is lifted out: the vendor's model name, the messages, whether it streams.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gateway.core.clearance import CLEAR, Clearance
from gateway.core.completion import Choice
from gateway.core.endpoint import Endpoint

# The most tokens a choice may generate when a chat request sets no maximum: what the limits
# reserve for it, and what a vendor that needs a maximum (Anthropic's Messages API) is sent.
DEFAULT_MAX_TOKENS = 4096


@dataclass(slots=True)
class ChatCall:
    endpoint: ClassVar[Endpoint] = Endpoint.CHAT
    model: str  # the vendor's own model name (what follows "vendor/")
    messages: list[dict[str, Any]]
    # Every other parameter the request sets (not null), by its name on the wire; the gateway's
    # own fields (model, stream, stream_options) are not among them.
    parameters: Mapping[str, Any] = field(default_factory=dict)
    stream: bool = False
    # Where the vendor layer names the deployment that served the call (the ledger records it).
    served_by: list[str] = field(default_factory=list)
    clearance: Clearance = CLEAR  # the request's (core/clearance.py): awaited before a vendor is asked
    # The conversation as text, once (`prompt_text`): what an estimate of its tokens counts.
    prompts: list[str] = field(default_factory=list)

    def given(self, name: str) -> Any:
        """The value of parameter `name` when the request sets it, else None."""
        if name == "messages":
            return self.messages
        return self.parameters.get(name)

    def most_tokens(self) -> int | None:
        max_tokens = self.max_tokens
        return None if max_tokens is None else max_tokens * self.n

    def split(self, prompts: list[str], n: int, seed: int | None) -> ChatCall:
        """The call for `n` of its choices, sampled from `seed` (its one conversation: `prompts`)."""
        parameters = dict(self.parameters)
        parameters.pop("n", None)
        if n > 1:
            parameters["n"] = n
        if seed is not None:
            parameters["seed"] = seed
        return dataclasses.replace(self, parameters=parameters, prompts=prompts)  # one `served_by` list for all

    @property
    def n(self) -> int:
        return self.parameters.get("n") or 1

    @property
    def max_tokens(self) -> int | None:
        """The most tokens a choice may generate: `max_completion_tokens`, else `max_tokens`, else
        None (the vendor's default)."""
        return self.parameters.get("max_completion_tokens") or self.parameters.get("max_tokens")


@dataclass(slots=True)
class ChatChoice(Choice):
    """A chat choice, or in a stream one choice's new piece: `text` is the message's content (a
    piece of it), `tool_calls` its tool calls (in a stream, pieces of them: OpenAI's deltas, each
    with its `index`), `function_call` the deprecated single call, `refusal` a refusal's text."""

    tool_calls: list[dict[str, Any]] | None = None
    function_call: dict[str, Any] | None = None
    refusal: str | None = None


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """The text of a conversation as the ledger and the limits estimate it (every message's role,
    name, content and tool calls, one after the other), when nothing better counts it."""
    pieces = []
    for message in messages:
        pieces.append(message.get("role", ""))
        if isinstance(message.get("name"), str):
            pieces.append(message["name"])
        pieces.append(content_text(message.get("content")))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            pieces.append(f"{function.get('name', '')}({function.get('arguments', '')})")
    return "\n".join(pieces)


def content_text(content: Any) -> str:
    """A message's content as text: itself, or its text (and refusal) parts joined; images count
    for nothing here."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text") or part.get("refusal") or "" for part in content if isinstance(part, dict))
