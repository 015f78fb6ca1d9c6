"""OpenAI's `/v1/chat/completions`: the chat side of the OpenAI protocol (vendors/openai/adapter.py);
its answers are read by the chat wire's reader (vendors/chat_wire.py), which every engine speaking
it shares (the embedded model's too, vendors/local/chat.py).

The contract is this protocol, so a request goes on as the client wrote it, less what the gateway
keeps for itself (the caller's OpenAI key, refused; `user` on a server that has no use for it,
recorded by the gateway) and with usage always asked for in a stream; logprobs are asked of a
server as it can give OpenAI's, and cut back to them (vendors/logprobs.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from gateway.core.chat import ChatCall
from gateway.core.completion import Chunk, Result
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
from gateway.vendors.chat_wire import CALLER_KEY, read_chat, read_chat_chunk_json
from gateway.vendors.transport.answers import JsonEvents
from gateway.vendors.openai.servers import OPENAI, Server, lacking
from gateway.vendors.transport.http import HttpAdapter

CHAT_COMPLETIONS = "/chat/completions"
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


def chat_payload(call: ChatCall, caps: Capabilities, names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The vendor's request: the call's parameters that are native (under the server's own name
    for them, `names`: servers.py `chat_names`), the model and the messages."""
    payload: dict[str, Any] = {"model": call.model, "messages": call.messages}
    names = names or {}
    for name, value in call.parameters.items():
        if caps[name].kind == "native":
            payload[names.get(name, name)] = value
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
        payload = chat_payload(call, self.capabilities, self._server.chat_names)
        native = self.capabilities["top_logprobs"].kind == NATIVE
        if asked is not None and native and not self._server.zero_logprobs:
            payload["top_logprobs"] = logprobs.engine_alternatives(asked)
        return payload


