"""The tokens a native answer used, read from the vendor's own fields.

Every count is untrusted input (vendors/untrusted.py): a whole number from 0 to MAX_USAGE_TOKENS,
sums included, or the answer is refused as malformed (a 502, never billed). A count the vendor did
not report reads as None, not 0, so the gateway counts it itself and flags the usage estimated
(`Counted.billed`): a vendor that omits its usage is billed what was sent and received, never
nothing.

Per protocol, in a plain answer and in a stream:
- openai: `usage` (`prompt_tokens_details.cached_tokens`, `completion_tokens_details`); a stream's
  usage-only last chunk, which the gateway asks for (`stream_options.include_usage`, guard.py).
- anthropic: `usage`; `input_tokens` excludes the cache's reads and writes, which are added to the
  prompt (`cached_tokens`, `cache_creation_tokens`), as chat counts them; a stream's
  `message_start` usage, updated by `message_delta`'s cumulative counts.
- gemini: `usageMetadata`: `promptTokenCount` (holding `cachedContentTokenCount`) plus
  `toolUsePromptTokenCount` (grounding and tool results) as prompt, `candidatesTokenCount` plus
  `thoughtsTokenCount` as completion; a stream's last usageMetadata (each is cumulative).
- local (llama.cpp's /completion): `tokens_evaluated` and `tokens_predicted`, else `timings`'
  `prompt_n` + `cache_n` and `predicted_n`; `timings.cache_n` as cached tokens; in a stream, the
  last event's (the one with `stop: true`).
- http: the vendor's configured pointers, `prompt_tokens`/`completion_tokens` in an answer,
  `stream_prompt_tokens`/`stream_completion_tokens` in a stream's events (the last value wins).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.core.completion import Usage
from gateway.endpoints.inference.wires import NativeWire
from gateway.vendors import untrusted as read
from gateway.vendors.anthropic.messages import usage as anthropic_usage
from gateway.vendors.http_server.wire import count_at
from gateway.vendors.chat_wire import read_usage as openai_usage


@dataclass(frozen=True, slots=True)
class Counted:
    """What the vendor reported: each count, or None where it reported none."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: dict[str, int] | None = None
    completion_tokens_details: dict[str, int] | None = None

    @classmethod
    def of(cls, usage: Usage | None) -> Counted:
        if usage is None:
            return NOT_REPORTED
        return cls(usage.prompt_tokens, usage.completion_tokens, usage.prompt_tokens_details,
                   usage.completion_tokens_details)

    @property
    def reported(self) -> bool:
        return self.prompt_tokens is not None and self.completion_tokens is not None

    def billed(self, prompt: Callable[[], int], completion: Callable[[], int]) -> Usage:
        """The usage to bill: the vendor's counts, the gateway's own (`prompt()`, `completion()`,
        called only for what is missing) where it reported none, then flagged estimated."""
        usage = read.usage(self.prompt_tokens if self.prompt_tokens is not None else prompt(),
                           self.completion_tokens if self.completion_tokens is not None else completion(),
                           "the usage billed", self.prompt_tokens_details, self.completion_tokens_details)
        usage.estimated = not self.reported
        return usage


NOT_REPORTED = Counted()


def read_usage(wire: NativeWire, answer: Any) -> Counted:
    """The usage a plain (not streamed) answer reports. untrusted.Malformed when a count is not one."""
    if not isinstance(answer, dict):
        return NOT_REPORTED
    match wire.protocol:
        case "openai":
            return Counted.of(openai_usage(answer.get("usage")))
        case "anthropic":
            raw = read.obj(answer.get("usage"), "usage")
            return Counted.of(anthropic_usage(raw)) if raw else NOT_REPORTED
        case "gemini":
            return gemini(answer.get("usageMetadata"))
        case "local":
            return llama_cpp(answer)
        case "http":
            assert wire.http is not None
            return _counted(count_at(wire.http.prompt_tokens, answer), count_at(wire.http.completion_tokens, answer))
    raise ValueError(f"no usage reader for protocol {wire.protocol!r}")


class UsageTally:
    """A stream's usage, from its events as they pass (`feed` each decoded event's data; `counted`
    at any point, so a stream cut short bills what it had reported by then)."""

    def __init__(self, wire: NativeWire) -> None:
        self._wire = wire
        self._counted = NOT_REPORTED
        self._anthropic: dict[str, Any] = {}

    @property
    def counted(self) -> Counted:
        return self._counted

    def feed(self, event: Any) -> None:
        if not isinstance(event, dict):
            return
        match self._wire.protocol:
            case "openai":
                if (found := openai_usage(event.get("usage"))) is not None:
                    self._counted = Counted.of(found)
            case "anthropic":
                kind = event.get("type")
                if kind == "message_start":
                    self._anthropic.update(read.obj(read.obj(event.get("message"), "message").get("usage"), "usage"))
                elif kind == "message_delta":  # its counts are cumulative
                    self._anthropic.update(read.obj(event.get("usage"), "usage"))
                else:
                    return
                if self._anthropic:
                    self._counted = Counted.of(anthropic_usage(self._anthropic))
            case "gemini":
                if event.get("usageMetadata") is not None:
                    self._counted = gemini(event["usageMetadata"])
            case "local":
                if (found := llama_cpp(event)) is not NOT_REPORTED:
                    self._counted = found
            case "http":
                assert self._wire.http is not None
                prompt = count_at(self._wire.http.stream_prompt_tokens, event)
                completion = count_at(self._wire.http.stream_completion_tokens, event)
                self._counted = _counted(
                    prompt if prompt is not None else self._counted.prompt_tokens,
                    completion if completion is not None else self._counted.completion_tokens)


def gemini(metadata: Any) -> Counted:
    raw = read.obj(metadata, "usageMetadata")
    if not raw:
        return NOT_REPORTED
    thoughts = read.count(raw.get("thoughtsTokenCount"), "usageMetadata.thoughtsTokenCount")
    tools = read.count(raw.get("toolUsePromptTokenCount"), "usageMetadata.toolUsePromptTokenCount")
    cached = read.count(raw.get("cachedContentTokenCount"), "usageMetadata.cachedContentTokenCount")
    usage = read.usage(read.count(raw.get("promptTokenCount"), "usageMetadata.promptTokenCount") + tools,
                       read.count(raw.get("candidatesTokenCount"), "usageMetadata.candidatesTokenCount") + thoughts,
                       "usageMetadata", {"cached_tokens": cached} if cached else None,
                       {"reasoning_tokens": thoughts} if thoughts else None)
    return Counted.of(usage)


def llama_cpp(answer: dict[str, Any]) -> Counted:
    timings = read.obj(answer.get("timings"), "timings")
    cached = _optional(timings.get("cache_n"), "timings.cache_n")
    prompt = _optional(answer.get("tokens_evaluated"), "tokens_evaluated")
    if prompt is None and (processed := _optional(timings.get("prompt_n"), "timings.prompt_n")) is not None:
        prompt = processed + (cached or 0)
    completion = _optional(answer.get("tokens_predicted"), "tokens_predicted")
    if completion is None:
        completion = _optional(timings.get("predicted_n"), "timings.predicted_n")
    return _counted(prompt, completion, {"cached_tokens": cached} if cached else None)


def _optional(value: Any, what: str) -> int | None:
    return None if value is None else read.count(value, what)


def _counted(prompt: int | None, completion: int | None, prompt_details: dict[str, int] | None = None) -> Counted:
    if prompt is None and completion is None:
        return NOT_REPORTED
    # A count made of two (llama.cpp's prompt_n + cache_n) is held to the bound of one.
    return Counted(_optional(prompt, "the prompt's tokens"), _optional(completion, "the completion's tokens"),
                   prompt_details)
