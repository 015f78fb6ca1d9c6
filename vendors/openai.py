"""OpenAI's `/v1/completions` wire protocol: OpenAI itself and every OpenAI-compatible server
(vLLM, llama.cpp's server, Ollama, Together, Fireworks...), each configured as a named vendor
with a base URL.

The contract *is* this protocol, so every parameter passes through natively, including list
prompts, `n` and their prompt-major choice indexing. Streams always ask the vendor for usage
(`stream_options.include_usage`); the planner decides whether the client sees it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx
import orjson

from gateway.config import Settings, VendorConfig
from gateway.errors import VendorFailed
from vendors.base import PARAMETERS, Capabilities, Choice, Chunk, CompletionCall, Result, Usage
from vendors.http import error_message, paced, pooled_client, send, transport_error
from vendors.sse import MalformedStream, read_events

_JSON = {"content-type": "application/json"}
_OPTIONAL = ("best_of", "frequency_penalty", "presence_penalty", "logit_bias", "logprobs", "seed", "suffix",
             "temperature", "top_p", "user")  # fmt: skip


class OpenAIAdapter:
    protocol: ClassVar[str] = "openai"
    capabilities = Capabilities(native=frozenset(PARAMETERS))

    def __init__(self, config: VendorConfig, settings: Settings) -> None:
        self.name = config.name
        self._config = config
        headers = {"authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._client = pooled_client(config, settings.http_transport, headers)
        # Built once: httpx parses and merges a relative URL on every request (~50 µs).
        self._url = httpx.URL(f"{config.base_url}/completions")

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        await self._client.aclose()

    def not_ready(self) -> str | None:
        return None

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
        request = self._client.build_request("POST", self._url, content=orjson.dumps(self._payload(call)),
                                             headers=_JSON)
        response = await send(self._client, self._config, request, stream=False)
        try:
            data = orjson.loads(response.content)
            return Result(
                choices=[_choice(c) for c in data["choices"]],
                usage=_usage(data.get("usage")),
                system_fingerprint=data.get("system_fingerprint"),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise VendorFailed(f"vendor '{self.name}' sent a malformed completion: {exc}", vendor=self.name) from None

    async def stream(self, call: CompletionCall) -> AsyncIterator[Chunk]:
        timeouts = self._config.timeouts
        request = self._client.build_request("POST", self._url, content=orjson.dumps(self._payload(call)),
                                             headers=_JSON)
        response = await send(self._client, self._config, request, stream=True)
        try:
            body_chunks = paced(response.aiter_bytes(), timeouts.first_byte, timeouts.idle, timeouts.total)
            async for sse in read_events(body_chunks):
                if sse.data == "[DONE]":
                    return
                yield _chunk(self.name, sse.data)
            raise VendorFailed(f"vendor '{self.name}' ended the stream early", vendor=self.name)
        except (httpx.HTTPError, TimeoutError) as exc:
            raise transport_error(self._config, exc) from None
        except MalformedStream as exc:
            raise VendorFailed(f"vendor '{self.name}' sent a malformed stream: {exc}", vendor=self.name) from None
        finally:
            await response.aclose()


def _chunk(vendor: str, data: str) -> Chunk:
    try:
        payload = orjson.loads(data)
        if payload.get("error"):
            raise VendorFailed(f"vendor '{vendor}' failed mid-stream: {error_message(data.encode())}", vendor=vendor)
        return Chunk(choices=[_choice(c) for c in payload.get("choices") or ()], usage=_usage(payload.get("usage")))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise VendorFailed(f"vendor '{vendor}' sent a malformed stream chunk: {exc}", vendor=vendor) from None


def _choice(raw: dict[str, Any]) -> Choice:
    return Choice(
        index=int(raw["index"]),
        text=raw.get("text") or "",
        finish_reason=raw.get("finish_reason"),
        logprobs=raw.get("logprobs"),
    )


def _usage(raw: dict[str, Any] | None) -> Usage | None:
    if not raw:
        return None
    return Usage(
        prompt_tokens=int(raw.get("prompt_tokens") or 0),
        completion_tokens=int(raw.get("completion_tokens") or 0),
        prompt_tokens_details=raw.get("prompt_tokens_details") or None,
        completion_tokens_details=raw.get("completion_tokens_details") or None,
    )
