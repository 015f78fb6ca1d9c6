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
from gateway.errors import GatewayError, VendorFailed
from vendors.base import PARAMETERS, Capabilities, Choice, Chunk, CompletionCall, Result, Usage
from vendors.http import connection_dropped, paced, pooled_client, transport_error, vendor_error
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
        request = self._client.build_request("POST", "/completions", content=orjson.dumps(self._payload(call)),
                                              headers=_JSON)
        try:
            response = await self._send(request)
            try:
                body = await response.aread()
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise transport_error(self._config, exc) from None
        if response.status_code != 200:
            raise self._error(response.status_code, body, response.headers.get("retry-after"))
        try:
            data = orjson.loads(body)
            return Result(
                choices=[_choice(c) for c in data["choices"]],
                usage=_usage(data.get("usage")),
                system_fingerprint=data.get("system_fingerprint"),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise VendorFailed(f"vendor '{self.name}' sent a malformed completion: {exc}", vendor=self.name) from None

    async def stream(self, call: CompletionCall) -> AsyncIterator[Chunk]:
        timeouts = self._config.timeouts
        request = self._client.build_request("POST", "/completions", content=orjson.dumps(self._payload(call)),
                                              headers=_JSON)
        try:
            async with asyncio.timeout(timeouts.first_byte):
                response = await self._send(request)
        except (httpx.HTTPError, TimeoutError) as exc:
            raise transport_error(self._config, exc) from None
        try:
            if response.status_code != 200:
                body = await response.aread()
                raise self._error(response.status_code, body, response.headers.get("retry-after"))
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

    async def _send(self, request: httpx.Request) -> httpx.Response:
        """The vendor's response, its body still to be read.

        Sent a second time when the connection drops before any answer. An HTTP/1.1 server may
        close a kept-alive connection just as the pool hands it out again; llama.cpp's server does
        it after every streamed answer although it announced keep-alive, so a request that reuses
        that connection right away fails (a few in a hundred under concurrency here). The vendor
        closed the connection without answering, so it did not serve the request: sending it
        again is safe, and by then the pool has noticed the closed connections."""
        try:
            return await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            if not connection_dropped(exc):
                raise
        await asyncio.sleep(0)  # lets the event loop see the other connections the vendor closed
        return await self._client.send(request, stream=True)

    def _error(self, status: int, body: bytes, retry_after: str | None) -> GatewayError:
        return vendor_error(self._config, status, _error_message(body), retry_after)


def _chunk(vendor: str, data: str) -> Chunk:
    try:
        payload = orjson.loads(data)
        if payload.get("error"):
            raise VendorFailed(f"vendor '{vendor}' failed mid-stream: {_message(payload)}", vendor=vendor)
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


def _error_message(body: bytes) -> str:
    try:
        return _message(orjson.loads(body))
    except (orjson.JSONDecodeError, TypeError, AttributeError):
        return body[:500].decode(errors="replace").strip()


def _message(payload: Any) -> str:
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    if isinstance(error, str):
        return error
    return str(payload)[:500]
