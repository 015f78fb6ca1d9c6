"""Google's Gemini API (`models/{model}:generateContent` and `:streamGenerateContent?alt=sse`,
`x-goog-api-key`) as a completions vendor (and a chat vendor: vendors/gemini/chat.py; what both
read alike is vendors/gemini/wire.py).

The prompt is the user's turn; the completion is the model's reply. `n` is `candidateCount` up to
`max_candidates` per call (1 by default, since the limit differs per model: Gemini 2.5 takes up to
8, others only 1; more choices are fanned out by the gateway). `logprobs` asks for
`responseLogprobs` and that many top candidates and comes back in the legacy shape. Thinking
models spend part of `maxOutputTokens` on thoughts: they count as completion tokens and as
`reasoning_tokens`, and their text is not part of the completion.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any


from gateway.core.completion import Choice, Chunk, CompletionCall, Result
from gateway.core.parameters import AT_LEAST_ONE, Capabilities, emulated, native, unsupported
from gateway.vendors.gemini import wire
from gateway.vendors import untrusted as read
from gateway.vendors.gemini.wire import GeminiOptions
from gateway.vendors.logprobs import with_sampled
from gateway.vendors.transport.http import HttpAdapter



def _field(name: str) -> Callable[[dict[str, Any], Any], None]:
    return lambda config, value: config.update({name: value})


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
    "seed": lambda config, value: config.update(seed=wire.int32_seed(value)),
    "presence_penalty": _field("presencePenalty"),
    "frequency_penalty": _field("frequencyPenalty"),
    "logprobs": _logprobs,
}


def capabilities(options: GeminiOptions) -> Capabilities:
    candidates = options.max_candidates
    return Capabilities("gemini", {
        "prompt": emulated(),  # one prompt per call
        "max_tokens": native(range=AT_LEAST_ONE),
        "n": native(per_call=candidates) if candidates > 1 else emulated(),
        "stop": native(per_call=wire.MAX_STOP),
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


class GeminiCompletions:
    """The completions translator of Gemini's generateContent: the prompt as one user turn."""

    def __init__(self, adapter: HttpAdapter, capabilities: Capabilities) -> None:
        self._adapter = adapter
        self.capabilities = capabilities
        self._wire = {name: _WIRE[name] for name in sorted(capabilities.native - {"max_tokens"})}


    def _payload(self, call: CompletionCall) -> dict[str, Any]:
        (prompt,) = call.prompts  # prompts_per_call = 1
        config: dict[str, Any] = {"maxOutputTokens": call.max_tokens}
        for name, write in self._wire.items():
            value = call.given(name)
            if value is not None:
                write(config, value)
        return {"contents": [{"role": "user", "parts": [{"text": prompt}]}], "generationConfig": config}

    async def complete(self, call: CompletionCall) -> Result:
        return await self._adapter._post_json(wire.url(call.model, "generateContent"), self._payload(call), call,
                                     lambda data: self._answer(data, call))

    def _answer(self, data: Any, call: CompletionCall) -> Result:
        return wire.answer(self._adapter.name, Reader(call), data)

    def stream(self, call: CompletionCall) -> AsyncIterator[list[Chunk]]:
        url = wire.url(call.model, "streamGenerateContent") + "?alt=sse"
        return self._adapter._sse_chunks(url, self._payload(call), call, lambda: wire.Stream(self._adapter.name, Reader(call)))


class Reader(wire.Reader):
    """Candidates as completion choices: their text, and `logprobs` in the legacy shape."""

    def __init__(self, call: CompletionCall) -> None:
        super().__init__(call.n)
        self._top = call.logprobs
        self._offsets = [0] * call.n  # text so far per candidate, for logprobs' text_offset

    def choice(self, index: int, parts: list[dict[str, Any]], finish: str, candidate: dict[str, Any]) -> Choice:
        text = wire.answer_text(parts)
        choice = Choice(index, text, wire.finish_reason(finish))
        if self._top is not None:
            choice.logprobs = self._logprobs(index, read.obj(candidate.get("logprobsResult"), "logprobsResult"))
        self._offsets[index] += len(text)
        return choice

    def _logprobs(self, index: int, result: dict[str, Any]) -> dict[str, list[Any]]:
        chosen, top = wire.chosen_and_top(result)
        offsets, at = [], self._offsets[index]
        for token, _ in chosen:
            offsets.append(at)
            at += len(token)
        return {
            "tokens": [token for token, _ in chosen],
            "token_logprobs": [logprob for _, logprob in chosen],
            # Gemini's top candidates need not include the chosen one; OpenAI's always do.
            "top_logprobs": [with_sampled(token, logprob, wire.top_candidates(top[i] if i < len(top) else {},
                                                                            self._top))
                             for i, (token, logprob) in enumerate(chosen)],
            "text_offset": offsets,
        }
