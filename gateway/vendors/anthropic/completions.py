"""Anthropic's Messages API (`POST /v1/messages`, `x-api-key`, `anthropic-version: 2023-06-01`)
as a completions vendor (and a chat vendor: vendors/anthropic/chat.py).

A text prompt becomes messages in one of two ways, chosen per vendor (`prompt_as`) and per model
(`user_turn_models`, glob patterns):

- "prefill" (the default): the prompt is the beginning of the assistant's reply, after a short
  user turn asking to continue it, so the model continues the text the way a completion model
  does. The Messages API rejects a prefill that ends in whitespace, so trailing whitespace is
  moved out of it: the prefill ends before it, and the same whitespace is dropped from the start
  of the reply, so that prompt + completion still reads as one text. The API also requires the
  first message to be the user's, hence the user turn.
- "user": the prompt is the user's message and the completion is the model's answer to it. Models
  that refuse prefills ("This model does not support assistant message prefill", Claude Opus 4.6,
  Sonnet 4.6 and later) need this; `user_turn_models` lists them by default.

`user` goes to `metadata.user_id`. The Messages API has no `n`, echo, logprobs, penalties, seed,
logit bias or suffix: `n` and echo are emulated by the gateway, the rest are rejected (400).
"""

from __future__ import annotations

import fnmatch
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any


from gateway.core.completion import Choice, Chunk, CompletionCall, Result, Usage
from gateway.core.errors import VendorFailed
from gateway.core.parameters import AT_LEAST_ONE, Capabilities, Range, emulated, native, unsupported
from gateway.vendors.anthropic import messages as wire
from gateway.vendors import untrusted as read
from gateway.vendors.anthropic.messages import MESSAGES
from gateway.vendors.transport.http import HttpAdapter

PREFILL_INSTRUCTION = "Continue the text exactly where it stops. Reply with the continuation only."
# How each native parameter goes into the Messages API request (prompt and max_tokens always do).
_WIRE: dict[str, Callable[[dict[str, Any], Any], None]] = {
    "stop": lambda payload, value: payload.update(stop_sequences=value),
    "temperature": lambda payload, value: payload.update(temperature=value),
    "top_p": lambda payload, value: payload.update(top_p=value),
    "user": lambda payload, value: payload.update(metadata={"user_id": value}),
}


def capabilities(options: object) -> Capabilities:
    """The same whatever the options (adapter.py AnthropicOptions)."""
    return Capabilities("anthropic", {
        "prompt": emulated(),  # one prompt per Messages request
        "max_tokens": native(range=AT_LEAST_ONE),
        "stop": native(),
        "temperature": native(range=Range(0, 1)),
        "top_p": native(),
        "user": native(),
        "n": emulated(),
        "echo": emulated(),
        "best_of": emulated(),  # needs logprobs, so the planner finds it unsupported
        "logprobs": unsupported("the Messages API returns no token log probabilities"),
        "logit_bias": unsupported("the Messages API has no token biasing"),
        "frequency_penalty": unsupported("the Messages API has no repetition penalties"),
        "presence_penalty": unsupported("the Messages API has no repetition penalties"),
        "seed": unsupported("the Messages API has no sampling seed"),
        "suffix": unsupported("the Messages API has no fill-in-the-middle (text after the insertion point)"),
    })


class AnthropicCompletions:
    """The completions translator of Anthropic's Messages API: the prompt as a user turn, or
    prefilled as the assistant's (`prompt_as`)."""

    def __init__(self, adapter: HttpAdapter, capabilities: Capabilities, prompt_as: str,
                 user_turn_models: Iterable[str]) -> None:
        """`prompt_as`, `user_turn_models`: the vendor's options (adapter.py AnthropicOptions)."""
        self._adapter = adapter
        self.capabilities = capabilities
        self._wire = {name: _WIRE[name] for name in sorted(capabilities.native - {"prompt", "max_tokens"})}
        self._prompt_as = prompt_as
        self._user_turn_models = tuple(sorted(user_turn_models))


    async def complete(self, call: CompletionCall) -> Result:
        payload, reply = self._request(call)
        return await self._adapter._post_json(MESSAGES, payload, call, lambda data: self._message(data, _Reply(reply.moved)))

    def _message(self, data: Any, reply: _Reply) -> Result:
        try:
            return read_message(data, reply)
        except read.READ_ERRORS as exc:
            raise VendorFailed(f"vendor '{self._adapter.name}' sent a malformed message: {read.why(exc)}",
                               vendor=self._adapter.name) from None

    def stream(self, call: CompletionCall) -> AsyncIterator[list[Chunk]]:
        payload, reply = self._request(call)
        payload["stream"] = True
        # A reader per try: the reply's trimming of moved whitespace starts again with each.
        return self._adapter._sse_chunks(MESSAGES, payload, call,
                                lambda: wire.MessageStream(self._adapter._config, EventReader(_Reply(reply.moved))))

    def _request(self, call: CompletionCall) -> tuple[dict[str, Any], _Reply]:
        (prompt,) = call.prompts  # prompts_per_call = 1
        reply = _Reply("")
        if self._prompt_as == "user" or any(fnmatch.fnmatchcase(call.model, p) for p in self._user_turn_models):
            messages = [{"role": "user", "content": prompt}]
        else:
            prefill = prompt.rstrip()
            reply = _Reply(prompt[len(prefill) :])
            messages = [{"role": "user", "content": PREFILL_INSTRUCTION}]
            if prefill:  # text content must not be empty
                messages.append({"role": "assistant", "content": prefill})
        payload: dict[str, Any] = {"model": call.model, "max_tokens": call.max_tokens, "messages": messages}
        for name, write in self._wire.items():
            value = call.given(name)
            if value is not None:
                write(payload, value)
        return payload, reply


def read_message(data: Any, reply: _Reply) -> Result:
    """A non-streamed Message as one choice; untrusted.Malformed when it is not one."""
    data, blocks = wire.message_blocks(data)
    text = "".join(read.text(block.get("text"), "a text block's text") for block in blocks
                   if block.get("type") == "text")
    choice = Choice(0, reply.trim(text), wire.finish_reason(data.get("stop_reason"), wire.FINISH))
    return Result(choices=[choice], usage=wire.usage(read.obj(data["usage"], "usage")))


class EventReader(wire.Events):
    """A Messages stream as completion chunks: the text deltas (tool_use and pause_turn need tools,
    which completions never send; thinking deltas are not the completion)."""

    def __init__(self, reply: _Reply) -> None:
        super().__init__()
        self._reply = reply

    def content(self, kind: str, event: dict[str, Any]) -> Chunk | None:
        if kind == "content_block_delta":
            delta = read.obj(event.get("delta"), "a delta")
            if delta.get("type") == "text_delta":
                text = self._reply.trim(read.text(delta.get("text"), "a delta's text"))
                return Chunk([Choice(0, text)]) if text else None
        return None

    def last(self, finish: str, usage: Usage) -> Chunk:
        return Chunk([Choice(0, "", finish)], usage)


class _Reply:
    """Drops the whitespace that was moved out of the prefill from the start of the reply."""

    def __init__(self, moved: str) -> None:
        self.moved = moved  # the whitespace moved out of the prefill (what a retry starts from)
        self._moved = moved

    def trim(self, text: str) -> str:
        if not self._moved:
            return text
        same = 0
        while same < min(len(text), len(self._moved)) and text[same] == self._moved[same]:
            same += 1
        # The reply diverges from the moved whitespace, or has used it up: nothing more to drop.
        self._moved = self._moved[same:] if same == len(text) else ""
        return text[same:]
