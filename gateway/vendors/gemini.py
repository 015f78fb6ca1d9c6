"""Google's Gemini API (`models/{model}:generateContent` and `:streamGenerateContent?alt=sse`,
`x-goog-api-key`) as a completions vendor.

The prompt is the user's turn; the completion is the model's reply. `n` is `candidateCount` up to
`max_candidates` per call (1 by default, since the limit differs per model: Gemini 2.5 takes up to
8, others only 1; more choices are fanned out by the gateway). `logprobs` asks for
`responseLogprobs` and that many top candidates and comes back in the legacy shape. Thinking
models spend part of `maxOutputTokens` on thoughts: they count as completion tokens and as
`reasoning_tokens`, and their text is not part of the completion.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar
from urllib.parse import quote

import orjson
from pydantic import BaseModel, ConfigDict, PositiveInt

from gateway.core.completion import Choice, Chunk, CompletionCall, Result, Usage
from gateway.core.config import Settings, VendorConfig
from gateway.core.errors import GatewayError, VendorFailed
from gateway.core.parameters import AT_LEAST_ONE, Capabilities, emulated, native, no_chat, unsupported
from gateway.vendors import untrusted as read
from gateway.vendors.http import HttpAdapter
from gateway.vendors.logprobs import with_sampled
from gateway.vendors.sse_reader import Event
from gateway.vendors.vendor_errors import error_message, vendor_error

MAX_STOP = 5  # GenerationConfig.stopSequences: "up to 5"
_FILTERED = "content_filter"
_FINISH = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": _FILTERED,
    "RECITATION": _FILTERED,
    "LANGUAGE": _FILTERED,
    "BLOCKLIST": _FILTERED,
    "PROHIBITED_CONTENT": _FILTERED,
    "SPII": _FILTERED,
    "IMAGE_SAFETY": _FILTERED,
}


def _field(name: str) -> Callable[[dict[str, Any], Any], None]:
    return lambda config, value: config.update({name: value})


def int32_seed(seed: int) -> int:
    """The contract's int64 seed (and a fanned-out choice's seed + i, which may go beyond it) in
    Gemini's int32 `seed`, wrapped as two's complement: a seed already in range is sent as it is,
    and every seed maps to the same int32 each time."""
    return (seed + 2**31) % 2**32 - 2**31


def _logprobs(config: dict[str, Any], top: int) -> None:
    config["responseLogprobs"] = True
    config["logprobs"] = top


# How each native parameter goes into GenerationConfig (the prompt is the user's turn; one per call).
_WIRE: dict[str, Callable[[dict[str, Any], Any], None]] = {
    "max_tokens": _field("maxOutputTokens"),
    "n": _field("candidateCount"),
    "stop": _field("stopSequences"),
    "temperature": _field("temperature"),
    "top_p": _field("topP"),
    "seed": lambda config, value: config.update(seed=int32_seed(value)),
    "presence_penalty": _field("presencePenalty"),
    "frequency_penalty": _field("frequencyPenalty"),
    "logprobs": _logprobs,
}


class GeminiOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # candidateCount per call: the limit differs per model (Gemini 2.5 takes up to 8, others 1).
    max_candidates: PositiveInt = 1


# Chat on this protocol (its own chat API, mapped from OpenAI's shape) is not built yet: refused by name.
NO_CHAT = no_chat("gemini", "chat completions are not served on the gemini protocol yet (the mapping to "
                            "Gemini's generateContent is to come); its models serve POST /v5/completions")


def capabilities(options: GeminiOptions) -> Capabilities:
    candidates = options.max_candidates
    return Capabilities("gemini", {
        "prompt": emulated(),  # one prompt per call
        "max_tokens": native(range=AT_LEAST_ONE),
        "n": native(per_call=candidates) if candidates > 1 else emulated(),
        "stop": native(per_call=MAX_STOP),
        "temperature": native(),
        "top_p": native(),
        "seed": native(),  # an int32 field: wrapped into it (int32_seed)
        "presence_penalty": native(),
        "frequency_penalty": native(),
        "logprobs": native(),
        "best_of": emulated(),
        "echo": emulated(),
        "user": emulated(),  # generateContent has no end-user field: recorded in the ledger only
        "logit_bias": unsupported("generateContent has no token biasing"),
        "suffix": unsupported("generateContent has no fill-in-the-middle (text after the insertion point)"),
    })


class GeminiAdapter(HttpAdapter):
    protocol: ClassVar[str] = "gemini"
    default_base_url: ClassVar[str] = "https://generativelanguage.googleapis.com/v1beta"
    hosted_url: ClassVar[str] = default_base_url
    Options: ClassVar[type[BaseModel]] = GeminiOptions
    capabilities_of = staticmethod(capabilities)  # the support records for given options
    chat_capabilities_of = staticmethod(lambda options: NO_CHAT)

    def __init__(self, config: VendorConfig, options: GeminiOptions, settings: Settings) -> None:
        super().__init__(config, settings, lambda key: {"x-goog-api-key": key})
        self.capabilities = capabilities(options)
        self.chat_capabilities = NO_CHAT
        self._wire = {name: _WIRE[name] for name in sorted(self.capabilities.native - {"max_tokens"})}

    def _payload(self, call: CompletionCall) -> dict[str, Any]:
        (prompt,) = call.prompts  # prompts_per_call = 1
        config: dict[str, Any] = {"maxOutputTokens": call.max_tokens}
        for name, write in self._wire.items():
            value = call.given(name)
            if value is not None:
                write(config, value)
        return {"contents": [{"role": "user", "parts": [{"text": prompt}]}], "generationConfig": config}

    async def complete(self, call: CompletionCall) -> Result:
        return await self._post_json(_url(call, "generateContent"), self._payload(call), call.served_by,
                                     lambda data: self._answer(data, call))

    def _answer(self, data: Any, call: CompletionCall) -> Result:
        try:
            reader = Reader(call)
            choices = reader.read(data)
        except read.READ_ERRORS as exc:
            raise VendorFailed(f"vendor '{self.name}' sent a malformed answer: {read.why(exc)}",
                               vendor=self.name) from None
        for choice in choices:
            choice.finish_reason = choice.finish_reason or "stop"
        return Result(choices=choices, usage=reader.usage)

    def stream(self, call: CompletionCall) -> AsyncIterator[list[Chunk]]:
        url = _url(call, "streamGenerateContent") + "?alt=sse"
        return self._sse_chunks(url, self._payload(call), call.served_by, lambda: _Stream(self.name, Reader(call)))

    def _error(self, status: int, body: bytes, retry_after: str | None) -> GatewayError:
        # An invalid key is a 400 INVALID_ARGUMENT with reason API_KEY_INVALID: the gateway's
        # credentials, not the client's request, are at fault.
        if status == 400 and b"API_KEY_INVALID" in body:
            status = 401
        return vendor_error(self._config, status, error_message(body), retry_after)


def _url(call: CompletionCall, method: str) -> str:
    model = call.model.removeprefix("models/")
    return f"/models/{quote(model, safe='')}:{method}"


class Reader:
    """GenerateContentResponse objects (one, or one per stream event) as choices and usage;
    untrusted.Malformed for one that is not (a candidate index beyond the candidates asked for,
    more candidates than asked for)."""

    def __init__(self, call: CompletionCall) -> None:
        self._n = call.n
        self._top = call.logprobs
        self._offsets = [0] * call.n  # text so far per candidate, for logprobs' text_offset
        self._finished: set[int] = set()
        self.usage: Usage | None = None

    @property
    def finished_all(self) -> bool:
        return len(self._finished) == self._n

    def read(self, response: Any) -> list[Choice]:
        response = read.obj(response, "a response")
        if (metadata := response.get("usageMetadata")) is not None:
            self.usage = _usage(read.obj(metadata, "usageMetadata"))
        candidates = read.items(response.get("candidates"), "candidates")
        if len(candidates) > self._n:
            raise read.Malformed(f"{len(candidates)} candidates for a call that asked for {self._n}")
        feedback = read.obj(response.get("promptFeedback"), "promptFeedback")
        if not candidates and feedback.get("blockReason"):
            # The prompt was blocked: no candidate at all.
            self._finished.update(range(self._n))
            return [Choice(i, "", _FILTERED) for i in range(self._n)]
        choices = []
        for position, raw in enumerate(candidates):
            candidate = read.obj(raw, "a candidate")
            index = read.index(candidate.get("index", position), "a candidate's index", self._n)
            parts = [read.obj(part, "a part")
                     for part in read.items(read.obj(candidate.get("content"), "content").get("parts"), "parts")]
            text = "".join(read.text(part.get("text"), "a part's text") for part in parts if not part.get("thought"))
            finish = read.text(candidate.get("finishReason"), "finishReason")
            choice = Choice(index, text, _FINISH.get(finish, "stop") if finish else None)
            if self._top is not None:
                choice.logprobs = self._logprobs(index, read.obj(candidate.get("logprobsResult"), "logprobsResult"))
            self._offsets[index] += len(text)
            if finish:
                self._finished.add(index)
            choices.append(choice)
        return choices

    def _logprobs(self, index: int, result: dict[str, Any]) -> dict[str, list[Any]]:
        chosen = [read.obj(c, "a chosen candidate")
                  for c in read.items(result.get("chosenCandidates"), "chosenCandidates")]
        top = [read.obj(step, "a top candidates step")
               for step in read.items(result.get("topCandidates"), "topCandidates")]
        tokens = [read.token(c.get("token"), "a chosen candidate's token") for c in chosen]
        token_logprobs = [read.logprob(c.get("logProbability", 0.0), "logProbability") for c in chosen]
        offsets, at = [], self._offsets[index]
        for token in tokens:
            offsets.append(at)
            at += len(token)
        return {
            "tokens": tokens,
            "token_logprobs": token_logprobs,
            # Gemini's top candidates need not include the chosen one; OpenAI's always do.
            "top_logprobs": [with_sampled(token, logprob, _alternatives(top[i] if i < len(top) else {}, self._top))
                             for i, (token, logprob) in enumerate(zip(tokens, token_logprobs, strict=True))],
            "text_offset": offsets,
        }


class _Stream:
    """One try's stream (vendors/answers.py `StreamDecoder`). It has no end marker of its own: it
    ends with the body, well once every candidate has finished; the usage goes out last."""

    __slots__ = ("_name", "_reader")

    def __init__(self, name: str, reader: Reader) -> None:
        self._name = name
        self._reader = reader

    def read(self, batch: list[Event]) -> tuple[list[Chunk], bool, VendorFailed | None]:
        chunks: list[Chunk] = []
        for sse in batch:
            try:
                choices = self._reader.read(orjson.loads(sse.data))
            except read.READ_ERRORS as exc:
                return chunks, False, VendorFailed(
                    f"vendor '{self._name}' sent a malformed stream chunk: {read.why(exc)}", vendor=self._name)
            if choices:
                chunks.append(Chunk(choices))
        return chunks, False, None

    def end(self) -> list[Chunk]:
        if not self._reader.finished_all:
            raise VendorFailed(f"vendor '{self._name}' ended the stream before every candidate finished",
                               vendor=self._name)
        return [Chunk([], self._reader.usage)]


def _alternatives(step: dict[str, Any], top: int) -> list[tuple[str, float]]:
    alternatives = []
    for raw in read.items(step.get("candidates"), "candidates")[: min(top, read.MAX_ALTERNATIVES)]:
        candidate = read.obj(raw, "a top candidate")
        alternatives.append((read.token(candidate.get("token"), "a top candidate's token"),
                             read.logprob(candidate.get("logProbability", 0.0), "logProbability")))
    return alternatives


def _usage(raw: dict[str, Any]) -> Usage:
    """promptTokenCount includes cached content; thoughts are output the model was billed for."""
    thoughts = read.count(raw.get("thoughtsTokenCount"), "usageMetadata.thoughtsTokenCount")
    return read.usage(
        read.count(raw.get("promptTokenCount"), "usageMetadata.promptTokenCount"),
        read.count(raw.get("candidatesTokenCount"), "usageMetadata.candidatesTokenCount") + thoughts,
        "usageMetadata",
        {"cached_tokens": read.count(raw.get("cachedContentTokenCount"), "usageMetadata.cachedContentTokenCount")},
        {"reasoning_tokens": thoughts} if thoughts else None,
    )
