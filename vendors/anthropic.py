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
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, ClassVar

import httpx
import orjson

from gateway.config import Settings, VendorConfig
from gateway.errors import GatewayError, VendorFailed
from vendors.base import Capabilities, Choice, Chunk, CompletionCall, Range, Result, Usage
from vendors.http import HttpAdapter, error_message, post_json, sse_events, vendor_error

API_VERSION = "2023-06-01"
MESSAGES = "/v1/messages"
PREFILL_INSTRUCTION = "Continue the text exactly where it stops. Reply with the continuation only."
# Models documented to reject an assistant prefill; `user_turn_models` replaces this list.
USER_TURN_MODELS = ("claude-opus-4-6*", "claude-sonnet-4-6*")

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}


def capabilities(config: VendorConfig) -> Capabilities:
    return Capabilities(
        native=frozenset({"max_tokens", "stop", "temperature", "top_p", "user"}),
        unsupported={
            "logprobs": "the Messages API returns no token log probabilities",
            "logit_bias": "the Messages API has no token biasing",
            "frequency_penalty": "the Messages API has no repetition penalties",
            "presence_penalty": "the Messages API has no repetition penalties",
            "seed": "the Messages API has no sampling seed",
            "suffix": "the Messages API has no fill-in-the-middle (text after the insertion point)",
        },
        ranges={"temperature": Range(0, 1)},
        prompts_per_call=1,
    )


class AnthropicAdapter(HttpAdapter):
    protocol: ClassVar[str] = "anthropic"

    def __init__(self, config: VendorConfig, settings: Settings) -> None:
        super().__init__(config, settings, {"x-api-key": config.api_key, "anthropic-version": API_VERSION})
        self.capabilities = capabilities(config)
        self._prompt_as = config.option_choice("prompt_as", ("prefill", "user"))
        self._user_turn_models = tuple(config.option_names("user_turn_models") or USER_TURN_MODELS)
        self._url = httpx.URL(f"{config.base_url}{MESSAGES}")  # built once, as in vendors/openai.py

    async def complete(self, call: CompletionCall) -> Result:
        payload, reply = self._request(call)
        data = await post_json(self._client, self._config, self._url, payload, self._error)
        try:
            text = "".join(block["text"] for block in data["content"] if block.get("type") == "text")
            choice = Choice(0, reply.trim(text), _finish(data.get("stop_reason")))
            return Result(choices=[choice], usage=_usage(data["usage"]))
        except (LookupError, TypeError, ValueError, AttributeError) as exc:
            raise VendorFailed(f"vendor '{self.name}' sent a malformed message: {exc!r}", vendor=self.name) from None

    async def stream(self, call: CompletionCall) -> AsyncIterator[Chunk]:
        payload, reply = self._request(call)
        payload["stream"] = True
        usage: dict[str, Any] = {}
        finish: str | None = None
        events = sse_events(self._client, self._config, self._url, payload, self._error)
        async with aclosing(events):
            try:
                async for sse in events:
                    event = self._event(sse.data)
                    kind = event.get("type")
                    if kind == "content_block_delta" and event["delta"].get("type") == "text_delta":
                        if text := reply.trim(event["delta"]["text"]):
                            yield Chunk([Choice(0, text)])
                    elif kind == "message_start":
                        usage.update(event["message"].get("usage") or {})
                    elif kind == "message_delta":  # its usage counts are cumulative
                        usage.update(event.get("usage") or {})
                        finish = _finish(event["delta"].get("stop_reason"))
                    elif kind == "message_stop":
                        yield Chunk([Choice(0, "", finish or "stop")], _usage(usage))
                        return
                    elif kind == "error":
                        error = event.get("error") or {}
                        raise VendorFailed(
                            f"vendor '{self.name}' failed mid-stream: {error.get('type')}: {error.get('message')}",
                            vendor=self.name,
                        )
                    # ping, content_block_start/stop, thinking and other deltas, and event types added
                    # later (Anthropic's versioning policy) carry no completion text.
            except (LookupError, TypeError, AttributeError) as exc:
                raise VendorFailed(f"vendor '{self.name}' sent a malformed stream event: {exc!r}",
                                   vendor=self.name) from None
        raise VendorFailed(f"vendor '{self.name}' ended the stream before message_stop", vendor=self.name)

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
        if call.stop:
            payload["stop_sequences"] = call.stop
        if call.temperature is not None:
            payload["temperature"] = call.temperature
        if call.top_p is not None:
            payload["top_p"] = call.top_p
        if call.user is not None:
            payload["metadata"] = {"user_id": call.user}
        return payload, reply

    def _event(self, data: str) -> dict[str, Any]:
        try:
            event = orjson.loads(data)
            if not isinstance(event, dict):
                raise TypeError("an event is not a JSON object")
            return event
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise VendorFailed(f"vendor '{self.name}' sent a malformed stream event: {exc}", vendor=self.name) from None

    def _error(self, status: int, body: bytes, retry_after: str | None) -> GatewayError:
        # 529 overloaded_error is a 5xx like any other: the vendor's fault, worth a retry.
        return vendor_error(self._config, status, error_message(body), retry_after)


class _Reply:
    """Drops the whitespace that was moved out of the prefill from the start of the reply."""

    def __init__(self, moved: str) -> None:
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


def _finish(stop_reason: str | None) -> str:
    # tool_use and pause_turn need tools, which completions never send.
    return _FINISH.get(stop_reason or "", "stop")


def _usage(raw: dict[str, Any]) -> Usage:
    """Anthropic counts cache reads and writes apart from `input_tokens`; OpenAI's prompt_tokens
    includes them, with the cache reads as `cached_tokens`."""
    read = int(raw.get("cache_read_input_tokens") or 0)
    written = int(raw.get("cache_creation_input_tokens") or 0)
    details: dict[str, int] = {"cached_tokens": read}
    if written:
        details["cache_creation_tokens"] = written
    return Usage(
        prompt_tokens=int(raw.get("input_tokens") or 0) + read + written,
        completion_tokens=int(raw.get("output_tokens") or 0),
        prompt_tokens_details=details,
    )
