"""OpenAI's `/v1/chat/completions` wire protocol: the chat side of the OpenAI protocol (vendors/openai/adapter.py), and the reader
of chat answers for every engine that speaks it (the embedded model's too, vendors/local/chat.py).

The contract is this protocol, so a request goes on as the client wrote it, less what the gateway
keeps for itself (the caller's OpenAI key, refused; `user` on a server that has no use for it,
recorded by the gateway) and with usage always asked for in a stream; logprobs are asked of a
server as it can give OpenAI's, and cut back to them (vendors/logprobs.py). Every answer is read as
untrusted: choices within `n`, finish reasons from the contract's list, tool calls with ids and
names, logprobs bounded and rebuilt from checked values, so nothing unexpected passes through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import orjson

from gateway.core.chat import ChatCall, ChatChoice
from gateway.core.completion import Chunk, Result, Usage
from gateway.core.errors import VendorFailed
from gateway.core.parameters import (
    CHAT_EMULATABLE,
    CHAT_PARAMETERS,
    NATIVE,
    Capabilities,
    Support,
    emulated,
    native,
    unsupported,
)
from gateway.vendors import logprobs
from gateway.vendors import untrusted as read
from gateway.vendors.transport.answers import JsonEvents
from gateway.vendors.openai.servers import OPENAI, Server, lacking
from gateway.vendors.transport.http import HttpAdapter
from gateway.vendors.vendor_errors import payload_message

CHAT_COMPLETIONS = "/chat/completions"
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
MAX_TOOL_CALLS = 128  # tool calls in one choice (the contract's most tools; a vendor sending more is refused)
FINGERPRINT_LIMIT = 200  # characters of a system_fingerprint passed on (a longer one, or not text: dropped)
MAX_NAME = 256  # characters of a tool call's id or function name
CALLER_KEY = ("the gateway serves every request with its own vendor keys, limited and billed to the account; a "
              "caller's OpenAI key would bypass both, and a key in a request body travels through logs and traces")
# OpenAI features that compatible servers (vLLM, llama.cpp, ...) accept and ignore.
OPENAI_ONLY = ("audio", "functions", "function_call", "metadata", "modalities", "prediction", "reasoning_effort",
               "store")


def chat_capabilities(server: Server, lacks: frozenset[str]) -> Capabilities:
    """What a server of the OpenAI protocol does with each chat parameter: OpenAI itself everything
    but `top_k` (its API has none); a compatible server everything of the shared contract, samplers
    such as `top_k` included, less what it lacks (`server.chat_lacks`: emulated where the gateway
    can, else refused) and OpenAI's own features, which it would ignore; a server whose usage counts
    one task takes one choice per call; `lacks` (the vendor's configuration) takes a parameter away."""
    support: dict[str, Support] = {}
    for name in CHAT_PARAMETERS:
        if name == "x-openai-api-key":
            support[name] = unsupported(CALLER_KEY)
        elif name == "user" and (server is not OPENAI or name in lacks):
            support[name] = emulated()
        elif name in lacks:
            support[name] = unsupported("the server does not implement it (its vendor configuration says `lacks`)")
        elif server is OPENAI and name == "top_k":
            support[name] = unsupported("OpenAI's chat API has no top_k")
        elif server is not OPENAI and name in OPENAI_ONLY:
            support[name] = unsupported("an OpenAI feature that compatible servers accept and ignore")
        elif name in server.chat_lacks:
            support[name] = emulated() if name in CHAT_EMULATABLE else unsupported(lacking(server))
        elif name == "n" and server.one_task_per_call:
            support[name] = native(per_call=1)
        else:
            support[name] = native()
    return Capabilities.chat("openai", support)


def chat_payload(call: ChatCall, caps: Capabilities) -> dict[str, Any]:
    """The vendor's request: the call's parameters that are native, the model and the messages."""
    payload: dict[str, Any] = {"model": call.model, "messages": call.messages}
    for name, value in call.parameters.items():
        if caps[name].kind == "native":
            payload[name] = value
    if call.stream:
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
    return payload


class OpenAIChat:
    """The chat translator of the OpenAI protocol (POST {base}/chat/completions): the request is
    passed on nearly as the contract wrote it."""

    def __init__(self, adapter: HttpAdapter) -> None:
        self._adapter = adapter
        self.capabilities: Capabilities  # (`use` says them)
        self._server = OPENAI

    def use(self, capabilities: Capabilities, server: Server) -> None:
        """Serve as `server` does, with `capabilities` (the adapter's, as it identifies the server)."""
        self.capabilities = capabilities
        self._server = server

    async def complete(self, call: ChatCall) -> Result:
        asked = logprobs.chat_alternatives(call.parameters)
        return await self._adapter._post_json(CHAT_COMPLETIONS, self._chat_payload(call, asked),
                                     call, lambda data: self._chat_answer(data, call.n, asked))

    def _chat_answer(self, data: Any, n: int, asked: int | None) -> Result:
        try:
            result = read_chat(data, n)
        except read.READ_ERRORS as exc:
            raise VendorFailed(f"vendor '{self._adapter.name}' sent a malformed chat completion: {read.why(exc)}",
                               vendor=self._adapter.name) from None
        logprobs.as_asked(result.choices, asked)
        return result

    def stream(self, call: ChatCall) -> AsyncIterator[list[Chunk]]:
        asked = logprobs.chat_alternatives(call.parameters)

        def chunk(data: str | bytes) -> Chunk:
            found = read_chat_chunk_json(data, call.n)
            logprobs.as_asked(found.choices, asked)
            return found

        def decoder() -> JsonEvents[Chunk]:
            return JsonEvents(self._adapter._config, chunk)

        return self._adapter._sse_chunks(CHAT_COMPLETIONS, self._chat_payload(call, asked),
                                call, decoder)

    def _chat_payload(self, call: ChatCall, asked: int | None) -> dict[str, Any]:
        """The payload; logprobs asked of a server that reads `top_logprobs: 0` (or none) as "no
        entries" ask for one alternative at least (cut back as the answer is read)."""
        payload = chat_payload(call, self.capabilities)
        native = self.capabilities["top_logprobs"].kind == NATIVE
        if asked is not None and native and not self._server.zero_logprobs:
            payload["top_logprobs"] = logprobs.engine_alternatives(asked)
        return payload


def read_chat(data: Any, n: int) -> Result:
    """A non-streamed chat answer of `n` choices; untrusted.Malformed when it is not one."""
    data = read.obj(data, "the answer")
    if "choices" not in data:
        raise read.Malformed("the answer has no choices")
    choices = []
    for raw in read.items(data["choices"], "choices"):
        raw = read.obj(raw, "a choice")
        message = read.obj(raw.get("message"), "a choice's message")
        choices.append(ChatChoice(
            read.index(raw.get("index"), "a choice's index", n),
            read.text(message.get("content"), "a message's content"),
            _finish(raw.get("finish_reason")) or "stop",
            _logprobs(raw.get("logprobs")),
            tool_calls=_tool_calls(message.get("tool_calls"), streamed=False),
            function_call=_function(message.get("function_call"), streamed=False),
            refusal=_optional_text(message.get("refusal"), "a message's refusal")))
    if len({c.index for c in choices}) != len(choices):
        raise read.Malformed("two choices have the same index")
    fingerprint = data.get("system_fingerprint")
    return Result(choices, read_usage(data.get("usage")) if data.get("usage") else None,
                  fingerprint if isinstance(fingerprint, str) and len(fingerprint) <= FINGERPRINT_LIMIT else None)


def read_chat_chunk(payload: Any, n: int) -> Chunk:
    """One chunk of a chat stream of `n` choices (untrusted.Reported for the vendor's error event)."""
    payload = read.obj(payload, "a stream chunk")
    if payload.get("error"):
        raise read.Reported(payload_message(payload))
    choices = []
    for raw in read.items(payload.get("choices"), "choices"):
        raw = read.obj(raw, "a choice")
        delta = read.obj(raw.get("delta"), "a choice's delta")
        choices.append(ChatChoice(
            read.index(raw.get("index"), "a choice's index", n),
            read.text(delta.get("content"), "a delta's content"),
            _finish(raw.get("finish_reason")),
            _logprobs(raw.get("logprobs")),
            tool_calls=_tool_calls(delta.get("tool_calls"), streamed=True),
            function_call=_function(delta.get("function_call"), streamed=True),
            refusal=_optional_text(delta.get("refusal"), "a delta's refusal")))
    usage = payload.get("usage")
    return Chunk(choices, read_usage(usage) if usage else None)


class _WireDelta(msgspec.Struct, gc=False):
    content: str | None = None
    tool_calls: Any = None
    function_call: Any = None
    refusal: Any = None


class _WireChoice(msgspec.Struct, gc=False):
    index: int
    delta: _WireDelta
    finish_reason: str | None = None
    logprobs: Any = None


class _WireChunk(msgspec.Struct, gc=False):
    choices: list[_WireChoice] = []
    usage: Any = None
    error: Any = None


# A chunk of text in its usual shape, decoded and type-checked in one pass (msgspec, in C), as
# completions.py reads a completions stream: most of what a chat stream costs per chunk is reading it.
_decode_usual = msgspec.json.Decoder(_WireChunk).decode


def read_chat_chunk_json(data: str | bytes, n: int) -> Chunk:
    """One chat stream event's data. A chunk of text in the usual shape (each choice an index in
    range, a delta of content alone, no logprobs) is read from its typed decoding; any other
    (tool calls, a refusal, logprobs, an error event, a value out of place) by `read_chat_chunk`
    from the JSON as it is, which reads the same chunk the same way (tests/unit/test_vendor_parsers.py)."""
    try:
        usual = _decode_usual(data)
    except (msgspec.DecodeError, RecursionError):  # (msgspec's depth limit is below orjson's)
        return read_chat_chunk(orjson.loads(data), n)
    if usual.error:
        return read_chat_chunk(orjson.loads(data), n)
    choices = []
    for wire in usual.choices:
        delta = wire.delta
        if (not 0 <= wire.index < n or wire.logprobs is not None or delta.tool_calls is not None
                or delta.function_call is not None or delta.refusal is not None):
            return read_chat_chunk(orjson.loads(data), n)
        finish = wire.finish_reason
        if finish is not None and finish not in FINISH_REASONS:
            finish = "stop"
        choices.append(ChatChoice(wire.index, delta.content or "", finish))
    usage = usual.usage
    return Chunk(choices, read_usage(usage) if usage else None)


def read_usage(raw: Any) -> Usage | None:
    """A usage object of the OpenAI protocol (completions' and chat's), checked; None when empty."""
    raw = read.obj(raw, "usage")
    if not raw:
        return None
    return read.usage(
        read.count(raw.get("prompt_tokens"), "usage.prompt_tokens"),
        read.count(raw.get("completion_tokens"), "usage.completion_tokens"),
        "usage",
        read.details(raw.get("prompt_tokens_details"), "usage.prompt_tokens_details"),
        read.details(raw.get("completion_tokens_details"), "usage.completion_tokens_details"),
    )


def _finish(value: Any) -> str | None:
    if value is None:
        return None
    reason = read.text(value, "a choice's finish_reason")
    return reason if reason in FINISH_REASONS else "stop"


def _optional_text(value: Any, what: str) -> str | None:
    return None if value is None else read.text(value, what)


def _tool_calls(value: Any, streamed: bool) -> list[dict[str, Any]] | None:
    """A message's tool calls (a stream's pieces of them: each with its `index`, `id` and name in
    its first piece only), rebuilt from checked values."""
    raw_calls = read.items(value, "tool_calls")
    if not raw_calls:
        return None
    if len(raw_calls) > MAX_TOOL_CALLS:
        raise read.Malformed(f"a message has more than {MAX_TOOL_CALLS} tool calls")
    calls = []
    for raw in raw_calls:
        raw = read.obj(raw, "a tool call")
        function = _function(raw.get("function"), streamed) or {}
        call: dict[str, Any] = {}
        if streamed:
            call["index"] = read.index(raw.get("index"), "a tool call's index", MAX_TOOL_CALLS)
        if raw.get("id") is not None or not streamed:
            call["id"] = read.text(raw.get("id"), "a tool call's id", MAX_NAME)
            if not call["id"]:
                raise read.Malformed("a tool call has no id")
            call["type"] = "function"
        call["function"] = function
        calls.append(call)
    return calls


def _function(value: Any, streamed: bool) -> dict[str, Any] | None:
    if value is None:
        return None
    raw = read.obj(value, "a function call")
    function: dict[str, Any] = {}
    if raw.get("name") is not None or not streamed:
        function["name"] = read.text(raw.get("name"), "a function's name", MAX_NAME)
        if not function["name"]:
            raise read.Malformed("a function call has no name")
    if raw.get("arguments") is not None or not streamed:
        function["arguments"] = read.text(raw.get("arguments"), "a function's arguments")
    return function


def _logprobs(value: Any) -> dict[str, Any] | None:
    """A choice's chat logprobs (`content`, `refusal`: lists of tokens with their alternatives)."""
    if value is None:
        return None
    raw = read.obj(value, "logprobs")
    return {part: None if raw.get(part) is None else [_token(t) for t in read.items(raw[part], f"logprobs.{part}")]
            for part in ("content", "refusal")}


def _token(value: Any, top: bool = False) -> dict[str, Any]:
    raw = read.obj(value, "a token's logprob")
    entry: dict[str, Any] = {"token": read.token(raw.get("token"), "a token"),
                             "logprob": read.logprob(raw.get("logprob"), "a token's logprob"),
                             "bytes": None if raw.get("bytes") is None else list(read.token_bytes(raw["bytes"],
                                                                                               "a token's bytes"))}
    if not top:
        alternatives = read.items(raw.get("top_logprobs"), "top_logprobs")
        if len(alternatives) > read.MAX_ALTERNATIVES:
            raise read.Malformed(f"a token has more than {read.MAX_ALTERNATIVES} alternatives")
        entry["top_logprobs"] = [_token(t, top=True) for t in alternatives]
    return entry
