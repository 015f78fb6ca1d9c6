"""The embedded model's chat: the conversation rendered by the model's own chat template (SmolLM2
ships one; llama.cpp's engine applies it), `response_format` by the engine's constrained decoding
(llama.cpp turns a JSON schema, or "a JSON object", into a grammar), logprobs from the engine as
OpenAI gives them (vendors/logprobs.py `as_asked`).

The engine is asked once per choice, each with `seed + i`, as the completions side does: its own
`n` reports one choice's usage only. Tools are refused: SmolLM2's template has no tool calling,
and a tool call forced by grammar would be the gateway's invention, not the model's. So is an
image part, by where it stands: the model reads text only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from gateway.core.chat import ChatCall, ChatChoice
from gateway.core.completion import Chunk, Result, Usage, candidates_usage, choice_seed
from gateway.core.errors import VendorFailed
from gateway.core.parameters import CHAT_PARAMETERS, Capabilities, Support, emulated, native, unsupported
from gateway.core.streams import merged
from gateway.vendors import conversation, logprobs
from gateway.vendors import untrusted as read
from gateway.vendors.local.engine import EngineError, engine_seed
from gateway.vendors.local.model import Embedded
from gateway.vendors.openai.chat import CALLER_KEY, read_chat_chunk

_NO_TOOLS = "the model's chat template has no tool calling (the gateway does not force calls by grammar)"
_REFUSED = {
    "tools": _NO_TOOLS, "tool_choice": _NO_TOOLS, "parallel_tool_calls": _NO_TOOLS, "functions": _NO_TOOLS,
    "function_call": _NO_TOOLS,
    "audio": "a text-only model", "modalities": "a text-only model",
    "prediction": "the engine has no predicted outputs", "reasoning_effort": "not a reasoning model",
    "store": "the embedded model keeps nothing", "metadata": "the embedded model keeps nothing to tag",
    "x-openai-api-key": CALLER_KEY,
}
# Written into the engine's request as they are (OpenAI's names are llama.cpp's).
_PASSED = ("logit_bias", "stop", "response_format", "top_k")


def _capabilities() -> Capabilities:
    support: dict[str, Support] = {}
    for name in CHAT_PARAMETERS:
        if name in _REFUSED:
            support[name] = unsupported(_REFUSED[name])
        elif name == "user":
            support[name] = emulated()  # recorded with the usage: a local model has no use for it
        else:
            support[name] = native()
    return Capabilities.chat("local", support)


CHAT = _capabilities()


class LocalChat:
    """The chat translator of the embedded model: its chat template, constrained decoding
    for JSON answers."""

    def __init__(self, adapter: Embedded, capabilities: Capabilities) -> None:
        self._adapter = adapter
        self.capabilities = capabilities


    def refused(self, call: ChatCall) -> tuple[str, str] | None:
        """An image part, by where it stands: the model reads text only (the engine would fail on
        it); an assistant turn that is only a deprecated `function_call`, which the model's chat
        template cannot write (it takes content or tool_calls, and fails on anything else)."""
        where = conversation.first_image(call.messages)
        if where is not None:
            return where, f"an image part, and model '{call.model}' reads text only"
        for i, message in enumerate(call.messages):
            if message.get("role") == "assistant" and message.get("function_call") is not None \
                    and not message.get("content") and not message.get("tool_calls"):
                return f"messages[{i}].function_call", f"{_NO_TOOLS}: an assistant turn that is only a function call"
        return None

    async def complete(self, call: ChatCall) -> Result:
        self._adapter._ready(call.model)
        await call.clearance.wait()
        clearance = call.clearance
        choices, usages = [], []
        async with aclosing(self._choices(call)) as pieces:
            parts: dict[int, list[str]] = {}
            finishes: dict[int, str | None] = {}
            tokens: dict[int, list[Any]] = {}  # each choice's logprobs entries
            async for i, piece in pieces:
                if isinstance(piece, Usage):
                    usages.append(piece)
                    continue
                parts.setdefault(i, []).append(piece.text)
                if piece.text:
                    clearance.generated(i, piece.text)
                finishes[i] = piece.finish_reason or finishes.get(i)
                if piece.logprobs and piece.logprobs.get("content"):
                    tokens.setdefault(i, []).extend(piece.logprobs["content"])
        asked = logprobs.chat_alternatives(call.parameters) is not None
        for i in range(call.n):
            choices.append(ChatChoice(i, "".join(parts.get(i, ())), finishes.get(i) or "stop",
                                      {"content": tokens.get(i, []), "refusal": None} if asked else None))
        return Result(choices, self._usage(usages, call.n))

    async def stream(self, call: ChatCall) -> AsyncIterator[list[Chunk]]:
        self._adapter._ready(call.model)
        await call.clearance.wait()
        usages = []
        async with aclosing(self._choices(call)) as pieces:
            async for i, piece in pieces:
                if isinstance(piece, Usage):
                    usages.append(piece)
                elif piece.text or piece.finish_reason or piece.logprobs:
                    yield [Chunk([piece])]
        yield [Chunk([], self._usage(usages, call.n))]

    async def _choices(self, call: ChatCall) -> AsyncIterator[tuple[int, ChatChoice | Usage]]:
        """Every choice's pieces as the engine makes them (re-indexed), and each choice's usage."""
        streams = [self._engine_chat(call, i) for i in range(call.n)]
        try:
            async with aclosing(merged(streams)) as pieces:
                async for i, piece in pieces:
                    yield i, piece
        except EngineError as exc:
            raise self._adapter._error(exc) from None

    async def _engine_chat(self, call: ChatCall, choice: int) -> AsyncIterator[ChatChoice | Usage]:
        engine = self._adapter._engine
        asked = logprobs.chat_alternatives(call.parameters)
        async with aclosing(engine.generate(self._chat_body(call, choice), chat=True)) as chunks:
            async for raw in chunks:
                try:
                    chunk = read_chat_chunk(raw, 1)
                except (read.Reported, *read.READ_ERRORS) as exc:
                    raise EngineError(f"malformed engine chunk: {exc}") from None
                logprobs.as_asked(chunk.choices, asked)
                for piece in chunk.choices:
                    piece.index = choice
                    yield piece  # type: ignore[misc]
                if chunk.usage is not None:
                    yield chunk.usage

    def _chat_body(self, call: ChatCall, choice: int) -> dict[str, Any]:
        """The engine's request for one choice, with OpenAI's sampling (no hidden top-k or min-p)."""
        given = call.parameters
        body: dict[str, Any] = {"messages": call.messages, "stream_options": {"include_usage": True},
                                "temperature": 1.0 if given.get("temperature") is None else given["temperature"],
                                "samplers": ["temperature"]}
        context = self._adapter._engine.options.context_size
        body["max_tokens"] = min(call.max_tokens or context, context)
        if given.get("presence_penalty") or given.get("frequency_penalty"):
            body["samplers"].insert(0, "penalties")
            body["presence_penalty"] = given.get("presence_penalty") or 0.0
            body["frequency_penalty"] = given.get("frequency_penalty") or 0.0
            body["repeat_last_n"] = context
        if given.get("top_k"):
            body["samplers"].insert(-1, "top_k")
        if given.get("top_p") is not None and given["top_p"] < 1:
            body["samplers"].insert(-1, "top_p")
            body["top_p"] = given["top_p"]
        for name in _PASSED:
            if given.get(name) is not None:
                body[name] = given[name]
        asked = logprobs.chat_alternatives(given)
        if asked is not None:  # (cut back to what was asked as the pieces are read: _engine_chat)
            body["logprobs"] = True
            body["top_logprobs"] = logprobs.engine_alternatives(asked)
        seed = choice_seed(given.get("seed"), choice)
        if seed is not None:
            body["seed"] = engine_seed(seed)
        return body

    def _usage(self, usages: list[Usage], n: int) -> Usage:
        usage = candidates_usage(usages) if len(usages) == n else None
        if usage is None:
            raise VendorFailed("the embedded model ended a chat completion without reporting its usage")
        return usage
