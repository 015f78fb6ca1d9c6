"""The embedded model's completions translator: the engine's completions as the contract's
(vendors/local/adapter.py holds the engine and what both endpoints share).

Every contract parameter is served here except `suffix`. The engine does sampling, `stop`,
`logit_bias`, penalties and seeds itself; this translator adds what it lacks:
- `n` and `best_of`: one engine request per candidate (batched by the engine's slots); choice i
  uses seed + i, and `best_of` keeps the n candidates with the highest cumulative logprob;
- `echo`: the prompt prepended and, with `logprobs`, the prompt's own tokens scored exactly
  (Engine.score), so evaluation harnesses can score with `max_tokens` 0 or 1;
- `max_tokens: 0`: nothing is generated (the engine would treat 0 as 1);
- the empty prompt: generated from the model's start-of-text token, as OpenAI does;
- OpenAI's sampling: temperature and top_p default to 1 and act alone (no top-k or min-p),
  temperature before top_p;
- exact usage: the prompt counted once per prompt, the completion tokens of every candidate.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from gateway.core.completion import (
    Choice,
    Chunk,
    CompletionCall,
    Result,
    Usage,
    best_candidates,
    candidates_usage,
    choice_seed,
    completion_logprob,
)
from gateway.core.errors import BadRequest
from gateway.core.parameters import Capabilities, emulated, native, unsupported
from gateway.core.streams import merged
from gateway.vendors import untrusted as read
from gateway.vendors.local.engine import EngineError, engine_seed
from gateway.vendors.local.model import Embedded, LocalOptions
from gateway.vendors.logprobs import Offsets, TokenLogprob, concat, engine_entries, from_engine, legacy

log = logging.getLogger("gateway")

def _penalties(body: dict[str, Any], call: CompletionCall, context_size: int) -> None:
    if call.presence_penalty or call.frequency_penalty:
        body["samplers"].insert(0, "penalties")
        body["presence_penalty"] = call.presence_penalty or 0.0
        body["frequency_penalty"] = call.frequency_penalty or 0.0
        body["repeat_last_n"] = context_size  # "the text so far", prompt included


def _top_p(body: dict[str, Any], call: CompletionCall, context_size: int) -> None:
    if call.top_p is not None and call.top_p < 1:
        body["samplers"].append("top_p")
        body["top_p"] = call.top_p


def _logprobs(body: dict[str, Any], call: CompletionCall, context_size: int) -> None:
    if call.logprobs is not None or call.best_of:
        # The engine has no "chosen token only" (logprobs 0 gives none); best_of ranks by them.
        body["logprobs"] = max(call.logprobs or 0, 1)


def _plain(key: str) -> Callable[[dict[str, Any], CompletionCall, int], None]:
    def write(body: dict[str, Any], call: CompletionCall, context_size: int) -> None:
        if (value := call.given(key)) is not None:
            body[key] = value

    return write


# How each native parameter reaches the engine's request body. The adapter itself serves the
# others it declares native: one engine request per prompt and per candidate (`n`, `best_of`),
# `echo` by prepending (and scoring) the prompt, `max_tokens: 0` without the engine. The seed is
# written per candidate (seed + i).
_BODY: dict[str, Callable[[dict[str, Any], CompletionCall, int], None]] = {
    "max_tokens": lambda body, call, _: body.update(max_tokens=call.max_tokens),
    "temperature": lambda body, call, _: body.update(temperature=1.0 if call.temperature is None else call.temperature),
    "top_p": _top_p,
    "presence_penalty": _penalties,
    "frequency_penalty": _penalties,
    "stop": _plain("stop"),
    "logit_bias": _plain("logit_bias"),
    "logprobs": _logprobs,
}
_SERVED_BY_ADAPTER = frozenset({"prompt", "n", "best_of", "echo", "seed"})


def capabilities(options: LocalOptions) -> Capabilities:
    support = {name: native() for name in (*_BODY, *_SERVED_BY_ADAPTER) if name != "prompt"}
    support |= {
        # The planner fans a list of prompts out, one call per prompt.
        "prompt": emulated(),
        # Only recorded with the usage (an emulation of the gateway): a local model has no use for it.
        "user": emulated(),
        "suffix": unsupported("the model has no fill-in-the-middle tokens"),
    }
    return Capabilities("local", support)


class LocalCompletions:
    """The completions translator of the embedded model: the engine's completions, `n` and
    `best_of` as concurrent generations, echo and its logprobs scored by the engine."""

    def __init__(self, adapter: Embedded, capabilities: Capabilities) -> None:
        self._adapter = adapter
        self.capabilities = capabilities
        # Each body writer once (both penalties share one); a native parameter without one fails here.
        native = capabilities.native - _SERVED_BY_ADAPTER
        self._writers = tuple(dict.fromkeys(_BODY[name] for name in sorted(native)))


    async def complete(self, call: CompletionCall) -> Result:
        self._admit(call)
        await call.clearance.wait()  # the request's limits let it go (core/clearance.py)
        try:
            return await self._complete(call)
        except EngineError as exc:
            raise self._adapter._error(exc) from None

    async def stream(self, call: CompletionCall) -> AsyncIterator[list[Chunk]]:
        self._admit(call)
        await call.clearance.wait()
        try:
            async with aclosing(self._stream(call)) as chunks:
                async for chunk in chunks:
                    yield [chunk]  # the engine hands its pieces over one at a time
        except EngineError as exc:
            raise self._adapter._error(exc) from None

    async def _complete(self, call: CompletionCall) -> Result:
        prompt = await self._prompt(call)
        if call.max_tokens == 0:
            choices = [Choice(i, prompt.echoed, "length", prompt.logprobs(call)) for i in range(call.n)]
            return Result(choices, Usage(prompt.tokens, 0))
        count = call.best_of or call.n
        tasks = [asyncio.create_task(self._generation(call, candidate)) for candidate in range(count)]
        try:
            candidates = await asyncio.gather(*tasks)
        finally:  # one failed (or the caller left): stop the others
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        chosen = candidates
        if call.best_of:
            chosen = best_candidates(candidates, call.n, lambda g: completion_logprob(t.logprob for t in g.tokens))
        choices = []
        for i, generation in enumerate(chosen):
            logprobs = None
            if call.logprobs is not None:
                generated = legacy(generation.tokens, call.logprobs, Offsets(len(prompt.echoed)))
                logprobs = concat(prompt.logprobs(call), generated)
            choices.append(Choice(i, prompt.echoed + generation.text, generation.finish_reason, logprobs))
        return Result(choices, _usage([g.usage for g in candidates]))

    async def _stream(self, call: CompletionCall) -> AsyncIterator[Chunk]:
        prompt = await self._prompt(call)
        if call.echo:
            yield Chunk([Choice(i, prompt.echoed, None, prompt.logprobs(call)) for i in range(call.n)])
        if call.max_tokens == 0:
            yield Chunk([Choice(i, "", "length") for i in range(call.n)])
            yield Chunk([], Usage(prompt.tokens, 0))
            return
        offsets = [Offsets(len(prompt.echoed)) for _ in range(call.n)]
        usages: list[Usage | None] = [None] * call.n
        streams = [self._adapter._engine.generate(self._body(call, i)) for i in range(call.n)]
        async with aclosing(merged(streams)) as pieces:
            async for i, raw in pieces:
                piece = _Piece.of(raw)
                usages[i] = piece.usage or usages[i]
                logprobs = None
                if call.logprobs is not None and piece.tokens:
                    logprobs = legacy(piece.tokens, call.logprobs, offsets[i])
                if piece.text or piece.finish_reason or logprobs:
                    yield Chunk([Choice(i, piece.text, piece.finish_reason, logprobs)])
        yield Chunk([], _usage(usages))

    def _admit(self, call: CompletionCall) -> None:
        """Refuse what the engine cannot serve, before it is asked."""
        self._adapter._ready(call.model)
        if not call.prompts[0] and self._adapter._engine.start_token is None:
            raise self._adapter._invalid("prompt", "an empty prompt gives the model nothing to continue (it has no "
                                          "start-of-text token)")
        context = self._adapter._engine.options.context_size
        if call.max_tokens > context:
            raise self._adapter._invalid("max_tokens", f"max_tokens ({call.max_tokens}) exceeds the context size ({context})")
        vocab = self._adapter._engine.vocab_size
        outside = sorted((k for k in call.logit_bias or () if int(k) >= vocab), key=int)
        if outside:
            raise self._adapter._invalid("logit_bias", f"logit_bias names token ids {', '.join(outside)}, outside the "
                                              f"model's vocabulary (0..{vocab - 1})")

    async def _prompt(self, call: CompletionCall) -> _Prompt:
        """What the choices start with: the prompt if echoed, and its tokens when they are
        needed (scored for echo with logprobs; counted for usage when nothing is generated)."""
        text = call.prompts[0]
        prompt = _Prompt(echoed=text if call.echo else "")
        if call.max_tokens and not (call.echo and call.logprobs is not None):
            return prompt
        tokens = await self._adapter._engine.tokenize(text) if text else []
        prompt.tokens = len(tokens) or 1  # an empty prompt is read as the start-of-text token alone
        if prompt.tokens > self._adapter._engine.options.context_size:
            raise BadRequest(f"vendor '{self._adapter.name}': the prompt has {prompt.tokens} tokens, more than the "
                                 f"context size ({self._adapter._engine.options.context_size})",
                                 code="context_length_exceeded", param="prompt", vendor=self._adapter.name)
        if call.echo and call.logprobs is not None and tokens:  # an empty prompt echoes no tokens
            scored = await self._adapter._engine.score([token for token, _ in tokens], call.logprobs)
            # Token text comes from the tokenizer: a special token such as <|im_start|> is written
            # out in the prompt but scores as a token with no bytes.
            first = TokenLogprob(raw=tokens[0][1], logprob=None, top=None)
            rest = [TokenLogprob(raw, s.logprob, s.top) for (_, raw), s in zip(tokens[1:], scored, strict=True)]
            prompt.scored = [first, *rest]
        return prompt

    async def _generation(self, call: CompletionCall, candidate: int) -> _Generation:
        generation = _Generation()
        clearance = call.clearance
        async with aclosing(self._adapter._engine.generate(self._body(call, candidate))) as chunks:
            async for raw in chunks:
                piece = _Piece.of(raw)
                generation.parts.append(piece.text)
                if piece.text:
                    clearance.generated(candidate, piece.text)
                generation.tokens.extend(piece.tokens)
                generation.finish_reason = piece.finish_reason or generation.finish_reason
                generation.usage = piece.usage or generation.usage
        return generation

    def _body(self, call: CompletionCall, candidate: int) -> dict[str, Any]:
        """The engine request for one candidate of `call`, with OpenAI's sampling: logit_bias
        (always first in llama.cpp), penalties, temperature, top_p; no hidden top-k or min-p.
        `user` is deliberately not sent."""
        # An empty prompt is generated from the start-of-text token (the engine would generate nothing).
        prompt = call.prompts[0] or [self._adapter._engine.start_token]
        body: dict[str, Any] = {"prompt": prompt, "samplers": ["temperature"]}
        for write in self._writers:
            write(body, call, self._adapter._engine.options.context_size)
        seed = choice_seed(call.seed, candidate)
        if seed is not None:
            body["seed"] = engine_seed(seed)
        return body


@dataclass(slots=True)
class _Prompt:
    echoed: str  # the prompt when echoing, else ""
    tokens: int = 0  # counted only when needed
    scored: list[TokenLogprob] | None = None  # echo with logprobs: every prompt token

    def logprobs(self, call: CompletionCall) -> dict[str, Any] | None:
        """The legacy logprobs this choice starts with (empty lists when the prompt is not echoed)."""
        if call.logprobs is None:
            return None
        return legacy(self.scored or (), call.logprobs, Offsets())


@dataclass(slots=True)
class _Generation:
    parts: list[str] = field(default_factory=list)
    tokens: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)


@dataclass(slots=True)
class _Piece:
    """One streamed engine chunk (its only choice: we send one prompt and n = 1)."""

    text: str
    tokens: list[TokenLogprob]
    finish_reason: str | None
    usage: Usage | None

    @classmethod
    def of(cls, chunk: Any) -> _Piece:
        """One engine chunk, checked like a vendor's answer (EngineError otherwise)."""
        try:
            choices = read.items(read.obj(chunk, "a chunk").get("choices"), "choices")
            if not choices:
                raise read.Malformed("a chunk has no choice")
            choice = read.obj(choices[0], "a choice")
            usage = read.obj(chunk.get("usage"), "usage")
            return cls(
                text=read.text(choice.get("text"), "a choice's text"),
                tokens=[from_engine(entry) for entry in engine_entries(choice)],
                finish_reason=read.finish_reason(choice.get("finish_reason"), "a choice's finish_reason"),
                usage=read.usage(
                    read.count(usage.get("prompt_tokens"), "usage.prompt_tokens"),
                    read.count(usage.get("completion_tokens"), "usage.completion_tokens"),
                    "usage",
                    read.details(usage.get("prompt_tokens_details"), "usage.prompt_tokens_details"),
                ) if usage else None,
            )
        except read.READ_ERRORS as exc:
            raise EngineError(f"malformed engine chunk: {read.why(exc)}") from None


def _usage(usages: list[Usage | None]) -> Usage:
    usage = candidates_usage(usages)
    if usage is None:
        raise EngineError("the engine ended a completion without reporting its usage")
    return usage
