"""Anthropic's Messages API (`POST /v1/messages`, `x-api-key`, `anthropic-version: 2023-06-01`)
as a completions vendor.

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
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar, Literal

import orjson
from pydantic import BaseModel, ConfigDict

from gateway.core.completion import Choice, Chunk, CompletionCall, Result, Usage
from gateway.core.config import Names, Settings, VendorConfig
from gateway.core.errors import GatewayError, VendorFailed
from gateway.core.parameters import AT_LEAST_ONE, Capabilities, Range, emulated, native, no_chat, unsupported
from gateway.vendors import untrusted as read
from gateway.vendors.http import HttpAdapter
from gateway.vendors.sse_reader import Event
from gateway.vendors.vendor_errors import error_message, redact, vendor_error

API_VERSION = "2023-06-01"
MESSAGES = "/v1/messages"
PREFILL_INSTRUCTION = "Continue the text exactly where it stops. Reply with the continuation only."
# Models documented to reject an assistant prefill; `user_turn_models` replaces this list.
USER_TURN_MODELS = frozenset({"claude-opus-4-6*", "claude-sonnet-4-6*"})

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
# How each native parameter goes into the Messages API request (prompt and max_tokens always do).
_WIRE: dict[str, Callable[[dict[str, Any], Any], None]] = {
    "stop": lambda payload, value: payload.update(stop_sequences=value),
    "temperature": lambda payload, value: payload.update(temperature=value),
    "top_p": lambda payload, value: payload.update(top_p=value),
    "user": lambda payload, value: payload.update(metadata={"user_id": value}),
}


class AnthropicOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_as: Literal["prefill", "user"] = "prefill"
    user_turn_models: Names = USER_TURN_MODELS  # glob patterns of models that get the prompt as a user turn


# Chat on this protocol (its own chat API, mapped from OpenAI's shape) is not built yet: refused by name.
NO_CHAT = no_chat("anthropic", "chat completions are not served on the anthropic protocol yet (the mapping to "
                               "Anthropic's Messages API is to come); its models serve POST /v5/completions")


def capabilities(options: AnthropicOptions) -> Capabilities:
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


class AnthropicAdapter(HttpAdapter):
    protocol: ClassVar[str] = "anthropic"
    default_base_url: ClassVar[str] = "https://api.anthropic.com"
    hosted_url: ClassVar[str] = default_base_url
    Options: ClassVar[type[BaseModel]] = AnthropicOptions
    capabilities_of = staticmethod(capabilities)  # the support records for given options
    chat_capabilities_of = staticmethod(lambda options: NO_CHAT)

    def __init__(self, config: VendorConfig, options: AnthropicOptions, settings: Settings) -> None:
        super().__init__(config, settings, lambda key: {"x-api-key": key, "anthropic-version": API_VERSION},
                         paths=(MESSAGES,))
        self.capabilities = capabilities(options)
        self.chat_capabilities = NO_CHAT
        self._wire = {name: _WIRE[name] for name in sorted(self.capabilities.native - {"prompt", "max_tokens"})}
        self._prompt_as = options.prompt_as
        self._user_turn_models = tuple(sorted(options.user_turn_models))

    async def complete(self, call: CompletionCall) -> Result:
        payload, reply = self._request(call)
        return await self._post_json(MESSAGES, payload, call.served_by, lambda data: self._message(data, _Reply(reply.moved)))

    def _message(self, data: Any, reply: _Reply) -> Result:
        try:
            return read_message(data, reply)
        except read.READ_ERRORS as exc:
            raise VendorFailed(f"vendor '{self.name}' sent a malformed message: {read.why(exc)}",
                               vendor=self.name) from None

    def stream(self, call: CompletionCall) -> AsyncIterator[list[Chunk]]:
        payload, reply = self._request(call)
        payload["stream"] = True
        # A reader per try: the reply's trimming of moved whitespace starts again with each.
        return self._sse_chunks(MESSAGES, payload, call.served_by,
                                lambda: _Stream(self.name, self._config, EventReader(_Reply(reply.moved))))

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

    def _error(self, status: int, body: bytes, retry_after: str | None) -> GatewayError:
        # 529 overloaded_error is a 5xx like any other: the vendor's fault, worth a retry.
        return vendor_error(self._config, status, error_message(body), retry_after)


def read_message(data: Any, reply: _Reply) -> Result:
    """A non-streamed Message as one choice; untrusted.Malformed when it is not one."""
    data = read.obj(data, "the message")
    if "content" not in data or "usage" not in data:
        raise read.Malformed("the message lacks content or usage")
    blocks = [read.obj(block, "a content block") for block in read.items(data.get("content"), "content")]
    text = "".join(read.text(block.get("text"), "a text block's text") for block in blocks
                   if block.get("type") == "text")
    choice = Choice(0, reply.trim(text), _finish(data.get("stop_reason")))
    return Result(choices=[choice], usage=_usage(read.obj(data["usage"], "usage")))


class EventReader:
    """A Messages stream, one decoded event at a time: the text deltas as chunks, the last one
    with the finish reason and usage (`stopped` is then set). untrusted.Reported for an `error` event."""

    def __init__(self, reply: _Reply) -> None:
        self._reply = reply
        self._usage: dict[str, Any] = {}
        self._finish: str | None = None
        self.stopped = False

    def read(self, event: Any) -> Chunk | None:
        event = read.obj(event, "an event")
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = read.obj(event.get("delta"), "a delta")
            if delta.get("type") == "text_delta":
                text = self._reply.trim(read.text(delta.get("text"), "a delta's text"))
                return Chunk([Choice(0, text)]) if text else None
        elif kind == "message_start":
            self._usage.update(read.obj(read.obj(event.get("message"), "message").get("usage"), "usage"))
        elif kind == "message_delta":  # its usage counts are cumulative
            self._usage.update(read.obj(event.get("usage"), "usage"))
            self._finish = _finish(read.obj(event.get("delta"), "a delta").get("stop_reason"))
        elif kind == "message_stop":
            self.stopped = True
            return Chunk([Choice(0, "", self._finish or "stop")], _usage(self._usage))
        elif kind == "error":
            error = read.obj(event.get("error"), "error")
            kind_of_error = error.get("type") if isinstance(error.get("type"), str) else "error"
            message = error.get("message") if isinstance(error.get("message"), str) else ""
            raise read.Reported(f"{kind_of_error[:64]}: {message}")
        # ping, content_block_start/stop, thinking and other deltas, and event types added later
        # (Anthropic's versioning policy) carry no completion text.
        return None


class _Stream:
    """One try's stream (vendors/answers.py `StreamDecoder`): its events as chunks, up to message_stop."""

    __slots__ = ("_name", "_config", "_reader")

    def __init__(self, name: str, config: VendorConfig, reader: EventReader) -> None:
        self._name = name
        self._config = config
        self._reader = reader

    def read(self, batch: list[Event]) -> tuple[list[Chunk], bool, VendorFailed | None]:
        chunks = []
        reader = self._reader
        for sse in batch:
            try:
                chunk = reader.read(orjson.loads(sse.data))
            except read.READ_ERRORS as exc:
                return chunks, False, VendorFailed(
                    f"vendor '{self._name}' sent a malformed stream event: {read.why(exc)}", vendor=self._name)
            except read.Reported as exc:
                message = redact(self._config, exc.message) or "no reason given"
                return chunks, False, VendorFailed(f"vendor '{self._name}' failed mid-stream: {message}",
                                                   vendor=self._name)
            if chunk is not None:
                chunks.append(chunk)
            if reader.stopped:
                return chunks, True, None
        return chunks, False, None

    def end(self) -> list[Chunk]:
        raise VendorFailed(f"vendor '{self._name}' ended the stream before message_stop", vendor=self._name)


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


def _finish(stop_reason: Any) -> str:
    # tool_use and pause_turn need tools, which completions never send.
    return _FINISH.get(read.text(stop_reason, "stop_reason"), "stop")


def _usage(raw: dict[str, Any]) -> Usage:
    """Anthropic counts cache reads and writes apart from `input_tokens`; OpenAI's prompt_tokens
    includes them, with the cache reads as `cached_tokens`."""
    cached = read.count(raw.get("cache_read_input_tokens"), "usage.cache_read_input_tokens")
    written = read.count(raw.get("cache_creation_input_tokens"), "usage.cache_creation_input_tokens")
    details: dict[str, int] = {"cached_tokens": cached}
    if written:
        details["cache_creation_tokens"] = written
    return read.usage(read.count(raw.get("input_tokens"), "usage.input_tokens") + cached + written,
                      read.count(raw.get("output_tokens"), "usage.output_tokens"), "usage", details)
