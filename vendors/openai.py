"""OpenAI's `/v1/completions` wire protocol: OpenAI itself and every OpenAI-compatible server
(vLLM, llama.cpp's server, Ollama, Together, Fireworks...), each configured as a named vendor
with a base URL.

The contract *is* this protocol, so every parameter passes through natively, including list
prompts, `n` and their prompt-major choice indexing. Streams always ask the vendor for usage
(`stream_options.include_usage`); the planner decides whether the client sees it.

Compatible servers do not all implement everything (llama.cpp's server ignores `echo`, vLLM's V1
engine dropped `best_of`). The vendor's configuration says what its server lacks, and the gateway
then emulates it or rejects it with a 400 instead of letting the server ignore it:

    lacks = ["echo", "best_of"]   # any request parameter, or "prompt" for list prompts
    max_stop = 1                  # stop sequences it takes per request; more are matched by the gateway
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, ClassVar

import httpx
import orjson

from gateway.config import ConfigError, Settings, VendorConfig
from gateway.errors import GatewayError, VendorFailed
from vendors.base import PARAMETERS, Capabilities, Choice, Chunk, CompletionCall, Result, Usage
from vendors.http import HttpAdapter, error_message, payload_message, post_json, sse_events, vendor_error
from vendors.logprobs import Offsets, from_engine, legacy

_OPTIONAL = ("best_of", "frequency_penalty", "presence_penalty", "logit_bias", "logprobs", "seed", "suffix",
             "temperature", "top_p", "user")  # fmt: skip


def capabilities(config: VendorConfig) -> Capabilities:
    """Everything natively, less what the configuration says this server lacks."""
    lacks = config.option_names("lacks")
    unknown = lacks - {"prompt", *PARAMETERS}
    if unknown:
        raise ConfigError(f"vendor {config.name!r}: lacks names unknown parameters: {', '.join(sorted(unknown))}")
    return Capabilities(
        native=frozenset(PARAMETERS) - lacks,
        prompts_per_call=1 if "prompt" in lacks else None,
        max_stop=0 if "stop" in lacks else config.option_int("max_stop", None),
    )


class OpenAIAdapter(HttpAdapter):
    protocol: ClassVar[str] = "openai"

    def __init__(self, config: VendorConfig, settings: Settings) -> None:
        super().__init__(config, settings, {"authorization": f"Bearer {config.api_key}"} if config.api_key else {})
        self.capabilities = capabilities(config)
        # Built once: httpx parses and merges a relative URL on every request (~50 µs).
        self._url = httpx.URL(f"{config.base_url}/completions")

    def _payload(self, call: CompletionCall) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": call.model,
            "prompt": call.prompts[0] if len(call.prompts) == 1 else call.prompts,
            "max_tokens": call.max_tokens,
        }
        if call.n != 1:
            payload["n"] = call.n
        if call.echo:
            payload["echo"] = True
        if call.stop:
            payload["stop"] = call.stop
        for name in _OPTIONAL:
            value = getattr(call, name)
            if value is not None:
                payload[name] = value
        if call.stream:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        return payload

    async def complete(self, call: CompletionCall) -> Result:
        data = await post_json(self._client, self._config, self._url, self._payload(call), self._error)
        try:
            return Result(
                choices=[_choice(c, _Logprobs(call)) for c in data["choices"]],
                usage=_usage(data.get("usage")),
                system_fingerprint=data.get("system_fingerprint"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise VendorFailed(f"vendor '{self.name}' sent a malformed completion: {exc!r}", vendor=self.name) from None

    async def stream(self, call: CompletionCall) -> AsyncIterator[Chunk]:
        events = sse_events(self._client, self._config, self._url, self._payload(call), self._error)
        logprobs = _Logprobs(call)  # one per stream: offsets run on across its chunks
        async with aclosing(events):
            async for sse in events:
                if sse.data == "[DONE]":
                    return
                yield _chunk(self.name, sse.data, logprobs)
        raise VendorFailed(f"vendor '{self.name}' ended the stream early", vendor=self.name)

    def _error(self, status: int, body: bytes, retry_after: str | None) -> GatewayError:
        return vendor_error(self._config, status, error_message(body), retry_after)


def _chunk(vendor: str, data: str, logprobs: _Logprobs) -> Chunk:
    try:
        payload = orjson.loads(data)
        if payload.get("error"):
            raise VendorFailed(f"vendor '{vendor}' failed mid-stream: {payload_message(payload)}", vendor=vendor)
        choices = [_choice(c, logprobs) for c in payload.get("choices") or ()]
        return Chunk(choices=choices, usage=_usage(payload.get("usage")))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise VendorFailed(f"vendor '{vendor}' sent a malformed stream chunk: {exc}", vendor=vendor) from None


def _choice(raw: dict[str, Any], logprobs: _Logprobs) -> Choice:
    index = int(raw["index"])
    return Choice(
        index=index,
        text=raw.get("text") or "",
        finish_reason=raw.get("finish_reason"),
        logprobs=logprobs.legacy(index, raw.get("logprobs")),
    )


class _Logprobs:
    """A choice's logprobs as the contract shapes them. OpenAI answers in the legacy shape, passed
    on as it is; servers built on llama.cpp answer chat-style (`{"content": [...]}`), converted
    here with character offsets that run on across a stream's chunks."""

    def __init__(self, call: CompletionCall) -> None:
        self._top = call.logprobs or 0
        self._offsets: dict[int, Offsets] = {}

    def legacy(self, index: int, raw: Any) -> dict[str, Any] | None:
        if not isinstance(raw, dict) or "content" not in raw:
            return raw
        offsets = self._offsets.setdefault(index, Offsets())
        return legacy([from_engine(entry) for entry in raw["content"] or ()], self._top, offsets)


def _usage(raw: dict[str, Any] | None) -> Usage | None:
    if not raw:
        return None
    return Usage(
        prompt_tokens=int(raw.get("prompt_tokens") or 0),
        completion_tokens=int(raw.get("completion_tokens") or 0),
        prompt_tokens_details=raw.get("prompt_tokens_details") or None,
        completion_tokens_details=raw.get("completion_tokens_details") or None,
    )
