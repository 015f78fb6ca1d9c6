"""OpenAI's `/v1/completions` wire protocol: OpenAI itself and every OpenAI-compatible server
(vLLM, llama.cpp's server, Ollama, Together, Fireworks...), each configured as a named vendor
with a base URL.

The contract *is* this protocol, so every parameter passes through natively, including list
prompts, `n` and their prompt-major choice indexing. Streams always ask the vendor for usage
(`stream_options.include_usage`); the planner decides whether the client sees it.

Compatible servers do not all implement everything (llama.cpp's server ignores `echo` and counts
the usage of one choice only, vLLM's dropped `best_of`). Which server a vendor is, the gateway
finds out as it starts (vendors/openai/servers.py), or the configuration says; what the server
lacks is then emulated or refused with a 400 instead of being left to the server to ignore. The
configuration may add what a server lacks besides (adapter.py `OpenAIOptions`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import orjson

from gateway.core.completion import Choice, Chunk, CompletionCall, Result
from gateway.core.errors import VendorFailed
from gateway.core.parameters import (
    AT_LEAST_ONE,
    EMULATABLE,
    PARAMETERS,
    Capabilities,
    Support,
    emulated,
    native,
    unsupported,
)
from gateway.vendors.openai import servers
from gateway.vendors import untrusted as read
from gateway.vendors.transport.answers import JsonEvents
from gateway.vendors.logprobs import Offsets, from_engine, legacy, with_sampled
from gateway.vendors.openai.chat import FINGERPRINT_LIMIT, read_usage
from gateway.vendors.openai.servers import OpenAIOptions, Server
from gateway.vendors.transport.http import HttpAdapter
from gateway.vendors.vendor_errors import payload_message

log = logging.getLogger("gateway.vendors")

COMPLETIONS = "/completions"
# Sent on every call, whatever the request says: the vendor's defaults differ between servers.
ALWAYS_SENT = ("prompt", "max_tokens")
# The contract is this protocol: every parameter is native, unless a server lacks it. Listed by
# name, so a parameter added to the contract fails the adapter until it is listed here.
NATIVE = ("prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
          "presence_penalty", "seed", "stop", "suffix", "temperature", "top_p", "user")  # fmt: skip


def capabilities(options: OpenAIOptions, server: Server | None = None) -> Capabilities:
    """Everything natively (the contract is this protocol), less what the server lacks: what it is
    known to lack (`server`; by default the one the options name, or UNIDENTIFIED until it is
    identified), and what its vendor configuration says it lacks."""
    server = server or servers.declared(options.server, ()) or servers.UNIDENTIFIED
    support: dict[str, Support] = {}
    for name in NATIVE:
        if name in options.lacks or (name == "stop" and options.max_stop == 0):
            support[name] = emulated() if name in EMULATABLE else unsupported(
                "the server does not implement it (its vendor configuration says `lacks`) and the gateway cannot "
                "emulate it")
        elif name in server.lacks:
            support[name] = emulated() if name in EMULATABLE else unsupported(servers.lacking(server))
        elif name in ("prompt", "n") and server.one_task_per_call:
            support[name] = native(per_call=1)
        elif name == "max_tokens" and not server.zero_max_tokens:
            support[name] = native(range=AT_LEAST_ONE)
        else:
            support[name] = native(per_call=options.max_stop if name == "stop" else None)
    return Capabilities("openai", support)


class OpenAICompletions:
    """The completions translator of the OpenAI protocol (POST {base}/completions): the contract is
    this protocol, so what is native goes on the wire as it is."""

    def __init__(self, adapter: HttpAdapter) -> None:
        self._adapter = adapter
        self.capabilities: Capabilities  # (`use` says them)
        self._forwarded: tuple[str, ...] = ()
        self._logprobs_zero = 1

    def use(self, capabilities: Capabilities, server: Server) -> None:
        """Serve as `server` does, with `capabilities` (the adapter's, as it identifies the server)."""
        self.capabilities = capabilities
        # The parameters put on the wire as they are: only what is native (an emulated or
        # unsupported one never reaches the vendor), in the contract's order.
        self._forwarded = tuple(name for name in PARAMETERS if name in capabilities.native
                                and name not in ALWAYS_SENT)
        self._logprobs_zero = 0 if server.zero_logprobs else 1  # what `logprobs: 0` is sent as

    def _payload(self, call: CompletionCall) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": call.model,
            "prompt": call.prompts[0] if len(call.prompts) == 1 else call.prompts,
            "max_tokens": call.max_tokens,
        }
        for name in self._forwarded:
            value = call.given(name)
            if value is not None:
                payload[name] = value
        if call.logprobs == 0:
            payload["logprobs"] = self._logprobs_zero  # read back as 0 (_Logprobs)
        if call.stream:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        return payload

    async def complete(self, call: CompletionCall) -> Result:
        return await self._adapter._post_json(COMPLETIONS, self._payload(call), call,
                                     lambda data: self._completion(data, call))

    def _completion(self, data: Any, call: CompletionCall) -> Result:
        try:
            return read_completion(data, call)
        except read.READ_ERRORS as exc:
            raise VendorFailed(f"vendor '{self._adapter.name}' sent a malformed completion: {read.why(exc)}",
                               vendor=self._adapter.name) from None

    def stream(self, call: CompletionCall) -> AsyncIterator[list[Chunk]]:
        # (a reader per try: logprobs offsets run on across one stream's chunks)
        return self._adapter._sse_chunks(COMPLETIONS, self._payload(call), call,
                                lambda: JsonEvents(self._adapter._config, ChunkReader(call).read_json))


def read_completion(data: Any, call: CompletionCall) -> Result:
    """A non-streamed answer to `call`; untrusted.Malformed when it is not one."""
    data = read.obj(data, "the answer")
    if "choices" not in data:
        raise read.Malformed("the answer has no choices")
    logprobs = _Logprobs(call)
    choices = [_choice(c, logprobs, _choice_count(call)) for c in read.items(data["choices"], "choices")]
    if len({c.index for c in choices}) != len(choices):
        raise read.Malformed("two choices have the same index")
    fingerprint = data.get("system_fingerprint")
    return Result(choices, read_usage(data.get("usage")),
                  fingerprint if isinstance(fingerprint, str) and len(fingerprint) <= FINGERPRINT_LIMIT else None)


class _WireChoice(msgspec.Struct, gc=False):
    index: int
    text: str = ""
    finish_reason: str | None = None
    logprobs: Any = None


class _WireChunk(msgspec.Struct, gc=False):
    choices: list[_WireChoice] = []
    usage: Any = None
    error: Any = None


# A stream chunk in its usual shape, decoded and type-checked in one pass (msgspec, in C): what a
# stream costs per chunk is mostly reading it. Anything else goes to the general reader.
_decode_usual = msgspec.json.Decoder(_WireChunk).decode


class ChunkReader:
    """A stream's chunks, one event at a time (untrusted.Reported for the vendor's error event)."""

    def __init__(self, call: CompletionCall) -> None:
        self._bound = _choice_count(call)
        self._logprobs = _Logprobs(call)

    def read_json(self, data: str) -> Chunk:
        """One event's data. A chunk of the usual shape (choices with an index, text, a finish
        reason or null) is read from its typed decoding; any other, or any error event, by
        `read` from the JSON as it is, which reads it the same way or refuses it with its reason
        (tests/unit/test_vendor_parsers.py holds the two to the same answers)."""
        try:
            usual = _decode_usual(data)
        except (msgspec.DecodeError, RecursionError):  # (msgspec's depth limit is below orjson's)
            return self.read(orjson.loads(data))
        if usual.error:
            return self.read(orjson.loads(data))
        bound, logprobs = self._bound, self._logprobs
        for wire in usual.choices:
            if not 0 <= wire.index < bound:
                # Refused; the general reader says why, as it would for the same JSON (an integer
                # past 64 bits is a float to it), and before any choice's logprobs move on.
                return self.read(orjson.loads(data))
        choices = []
        for wire in usual.choices:
            index = wire.index
            finish = wire.finish_reason
            if finish is not None and finish not in read.FINISH_REASONS:
                finish = "stop"
            given = wire.logprobs
            choices.append(Choice(index, wire.text, finish, None if given is None else logprobs.legacy(index, given)))
        usage = usual.usage
        return Chunk(choices, None if usage is None else read_usage(usage))

    def read(self, payload: Any) -> Chunk:
        if type(payload) is not dict:
            payload = read.obj(payload, "a stream chunk")
        if payload.get("error"):
            raise read.Reported(payload_message(payload))
        raw = payload.get("choices")
        if type(raw) is not list:
            raw = read.items(raw, "choices")
        choices = []
        for choice in raw:
            choices.append(_choice(choice, self._logprobs, self._bound))
        usage = payload.get("usage")
        return Chunk(choices, None if usage is None else read_usage(usage))


def _choice_count(call: CompletionCall) -> int:
    """How many choices a call asks for: n per prompt, indexed prompt-major."""
    return call.n * len(call.prompts)


def _choice(raw: Any, logprobs: _Logprobs, bound: int) -> Choice:
    # Every chunk of a stream has its choices read here: the checks of untrusted.py are called
    # only for what is not plainly well-formed (they refuse it, or read a null as "not given").
    if type(raw) is not dict:
        raw = read.obj(raw, "a choice")
    index = raw.get("index")
    if type(index) is not int or not 0 <= index < bound:
        index = read.index(index, "a choice's index", bound)
    text = raw.get("text")
    if type(text) is not str:
        text = read.text(text, "a choice's text")
    finish = raw.get("finish_reason")
    if finish is not None:
        finish = read.finish_reason(finish, "a choice's finish_reason")
    given = raw.get("logprobs")
    return Choice(index, text, finish, None if given is None else logprobs.legacy(index, given))


class _Logprobs:
    """A choice's logprobs as the contract shapes them. OpenAI answers in the legacy shape, passed
    on once checked; servers built on llama.cpp answer chat-style (`{"content": [...]}`), converted
    here with character offsets that run on across a stream's chunks."""

    def __init__(self, call: CompletionCall) -> None:
        self._top = call.logprobs or 0
        self._offsets: dict[int, Offsets] = {}  # per choice index (checked: at most the call's choices)

    def legacy(self, index: int, raw: Any) -> dict[str, Any] | None:
        if not isinstance(raw, dict) or "content" not in raw:
            found = read.legacy_logprobs(raw, "logprobs")
            if found is not None and self._top == 0:  # asked of a server as 1 (OpenAIAdapter._payload)
                found["top_logprobs"] = [None if top is None else with_sampled(token, lp, ())
                                         for token, lp, top in zip(found["tokens"], found["token_logprobs"],
                                                                   found["top_logprobs"], strict=True)]
            return found
        entries = read.items(raw["content"], "logprobs.content")
        offsets = self._offsets.setdefault(index, Offsets())
        return legacy([from_engine(entry) for entry in entries], self._top, offsets)
