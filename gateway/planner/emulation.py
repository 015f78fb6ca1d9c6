"""What the gateway does itself when a vendor lacks a parameter: echo the prompt, match stop
sequences (also when one is split across stream chunks), rank `best_of` candidates by their
logprob, and answer `max_tokens: 0` on a vendor that cannot generate nothing (it is asked for one
token, which is dropped). `n` and list prompts are fanned out by planner/plan.py;
planner/capabilities.py decides which of these a request needs.

Stop sequences are cut the way a vendor cuts them: the text ends right before the sequence
(which is not included) and the choice finishes with "stop". When several could apply, the one
that is complete first in the text wins, as it would while generating. Logprobs stay consistent
with the cut text: tokens past the cut are dropped and a token the cut splits is shortened, so
the tokens still add up to the text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from gateway.core.completion import (
    Choice,
    Chunk,
    CompletionCall,
    Result,
    Usage,
    best_candidates,
    cumulative_logprob,
    rough_tokens,
)
from gateway.core.errors import VendorFailed
from gateway.planner.verify import Expected
from gateway.vendors.logprobs import with_sampled

Logprobs = dict[str, list[Any]]
_LISTS = ("tokens", "token_logprobs", "top_logprobs", "text_offset")


@dataclass(frozen=True, slots=True)
class Emulation:
    """The emulations one request needs (planner/capabilities.py `check` decides)."""

    echo: bool = False  # prepend each prompt to its choices
    stop: tuple[str, ...] = ()  # stop sequences matched by the gateway, not sent to the vendor
    best_of: int | None = None  # candidates per prompt, ranked here by cumulative logprob
    logprobs: bool = False  # the client asked for logprobs (best_of asks the vendor for them anyway)
    vendor_echoes: bool = False  # the vendor's text starts with the prompt (native echo): never matched
    user_recorded: bool = False  # the vendor has no end-user field: `user` is only recorded in the ledger
    # max_tokens 0 on a vendor whose least is 1: it is asked for 1 token, which is dropped (its usage,
    # what the vendor generated and bills, is kept).
    no_tokens: bool = False

    @property
    def rewrites_stream(self) -> bool:
        return self.echo or bool(self.stop) or self.no_tokens

    @property
    def rewrites_result(self) -> bool:
        return self.echo or bool(self.stop) or self.best_of is not None or self.no_tokens

    def per_prompt(self, n: int) -> int:
        """Choices the vendor calls generate per prompt."""
        return self.best_of or n

    def vendor_call(self, call: CompletionCall) -> CompletionCall:
        """The request less what the gateway does itself."""
        if not (self.rewrites_result or self.user_recorded):
            return call
        return dataclasses.replace(
            call,
            user=None if self.user_recorded else call.user,
            echo=call.echo and not self.echo,
            stop=[] if self.stop else call.stop,
            n=self.per_prompt(call.n),
            best_of=None if self.best_of else call.best_of,
            logprobs=0 if self.best_of and call.logprobs is None else call.logprobs,
            max_tokens=1 if self.no_tokens else call.max_tokens,
        )

    def complete(self, result: Result, prompts: Sequence[str], n: int, vendor: str) -> Result:
        """A merged answer (indexed prompt-major over `per_prompt(n)` choices) as the client asked."""
        per_prompt = self.per_prompt(n)
        choices = result.choices
        if self.no_tokens:
            for choice in choices:
                keep = len(prompts[choice.index // per_prompt]) if self.vendor_echoes else 0
                choice.text, choice.logprobs = choice.text[:keep], _upto(choice.logprobs, keep)
                choice.finish_reason = "length"
        if self.stop:
            for choice in choices:
                matcher = self._matcher(prompts[choice.index // per_prompt])
                choice.text, choice.logprobs = matcher.cut(choice.text, choice.logprobs)
                if matcher.stopped:
                    choice.finish_reason = "stop"
        if self.best_of:
            choices = _best(choices, len(prompts), per_prompt, n, vendor)
        for choice in choices:
            if not self.logprobs:
                choice.logprobs = None
            if self.echo:
                choice.text = prompts[choice.index // n] + choice.text
        return dataclasses.replace(result, choices=choices)

    async def stream(self, chunks: AsyncIterator[list[Chunk]], prompts: Sequence[str], n: int,
                     expected: Expected | None = None) -> AsyncIterator[list[Chunk]]:
        """One vendor call's chunks (indexes local to the call: prompt * n + i; in lists, as they
        arrived) with the prompt echoed first and stop sequences matched; `expected` is shown the
        vendor's own chunks, before they are rewritten. Once every choice has stopped, the vendor
        call is ended; its usage, which the vendor would have sent last, is then estimated."""
        total = len(prompts) * n
        matchers = [self._matcher(prompts[i // n]) for i in range(total)] if self.stop else []
        kept = _Kept(prompts, n, self.vendor_echoes) if self.no_tokens else None
        finished: set[int] = set()
        echoed = not self.echo
        generated = 0  # characters the vendor produced, for the estimate
        async with aclosing(chunks):
            async for batch in chunks:
                if expected is not None:
                    expected.batch(batch)
                rewritten = []
                for chunk in batch:
                    out = []
                    for choice in chunk.choices:
                        generated += len(choice.text)
                        if kept is not None:
                            choice = kept.cut(choice)
                        if matchers:
                            matcher = matchers[choice.index]
                            if matcher.stopped:
                                continue  # the vendor is still generating what the gateway cut
                            choice = _advance(matcher, choice)
                        if choice.finish_reason:
                            finished.add(choice.index)
                        if choice.text or choice.finish_reason or choice.logprobs:
                            out.append(choice)
                    if not echoed:
                        # Each choice's first piece starts with its prompt: one entry per choice in
                        # the chunk (clients read `choices[0]`; two of one index lose a piece).
                        out = _echoed(out, prompts, n, total)
                        echoed = True
                    if out or chunk.usage is not None:
                        rewritten.append(Chunk(out, chunk.usage))
                    if len(finished) == total and any(m.stopped for m in matchers):
                        yield [*rewritten, Chunk([], estimated_usage(prompts, generated))]
                        return
                if rewritten:
                    yield rewritten
        if expected is not None:
            expected.ended()
        if not echoed:
            yield [Chunk([Choice(i, prompts[i // n]) for i in range(total)])]

    def _matcher(self, prompt: str) -> StopMatcher:
        return StopMatcher(self.stop, skip=len(prompt) if self.vendor_echoes else 0)


NONE = Emulation()  # a request that needs none (every chat request)


def _echoed(pieces: list[Choice], prompts: Sequence[str], n: int, total: int) -> list[Choice]:
    """The first pieces of a stream's choices with each choice's prompt in front: prepended to the
    choice's own piece when the chunk has one, else a piece of its own."""
    firsts: dict[int, Choice] = {}
    for piece in pieces:
        firsts.setdefault(piece.index, piece)
    out = []
    for index in range(total):
        piece = firsts.get(index)
        prompt = prompts[index // n]
        out.append(Choice(index, prompt) if piece is None else
                   Choice(index, prompt + piece.text, piece.finish_reason, piece.logprobs))
    return out + [piece for piece in pieces if firsts[piece.index] is not piece]


class _Kept:
    """What is kept of a stream's text when nothing was to be generated: each choice's echo of its
    prompt by the vendor, if it echoes, and none of the token it was asked for instead of none."""

    def __init__(self, prompts: Sequence[str], n: int, vendor_echoes: bool) -> None:
        self._left = [len(prompts[i // n]) if vendor_echoes else 0 for i in range(len(prompts) * n)]

    def cut(self, choice: Choice) -> Choice:
        left = self._left[choice.index]
        text = choice.text[:left]
        self._left[choice.index] = left - len(text)
        logprobs = _upto(choice.logprobs, len(text)) if text else None
        return Choice(choice.index, text, choice.finish_reason and "length", logprobs)


def _upto(logprobs: Logprobs | None, chars: int) -> Logprobs | None:
    """The logprobs of the tokens that start within a text's first `chars` characters."""
    if logprobs is None:
        return None
    offsets = logprobs.get("text_offset") or []
    start = offsets[0] if offsets and offsets[0] is not None else 0
    count = sum(1 for at in offsets if at is not None and at - start < chars)
    return {key: list((logprobs.get(key) or [])[:count]) for key in _LISTS}


def _advance(matcher: StopMatcher, choice: Choice) -> Choice:
    text, logprobs = matcher.feed(choice.text, choice.logprobs)
    finish = choice.finish_reason
    if matcher.stopped:
        finish = "stop"
    elif finish is not None:  # the vendor ended the choice: nothing held back can become a stop
        rest, rest_logprobs = matcher.flush()
        text, logprobs = text + rest, join_logprobs(logprobs, rest_logprobs)
    return Choice(choice.index, text, finish, logprobs)


def _best(choices: list[Choice], prompts: int, per_prompt: int, n: int, vendor: str) -> list[Choice]:
    """The n candidates of each prompt with the highest cumulative logprob, re-indexed."""
    def score(choice: Choice) -> float:
        found = cumulative_logprob(choice.logprobs)
        if found is None:
            raise VendorFailed(f"vendor '{vendor}' returned no logprobs to rank best_of candidates by", vendor=vendor)
        return found

    best = []
    for prompt in range(prompts):
        group = [c for c in choices if c.index // per_prompt == prompt]
        for rank, choice in enumerate(best_candidates(group, n, score)):
            choice.index = prompt * n + rank
            best.append(choice)
    return best


def estimated_usage(prompts: Sequence[str], generated_chars: int) -> Usage:
    """Usage of a vendor call the gateway ended before the vendor reported it, marked as
    estimated for the ledger."""
    return Usage(sum(rough_tokens(len(p)) for p in prompts), rough_tokens(generated_chars), estimated=True)


def join_logprobs(a: Logprobs | None, b: Logprobs | None) -> Logprobs | None:
    if a is None or b is None:
        return a or b
    return {key: [*(a.get(key) or ()), *(b.get(key) or ())] for key in _LISTS}


@dataclass(slots=True)
class _Atom:
    """A run of text released whole, except when it carries no logprobs (then it splits at any
    character). `token`: the logprobs are of exactly this text, so its offset is ours to set."""

    text: str
    logprobs: Logprobs | None = None
    token: bool = False


class StopMatcher:
    """One choice's generated text, fed as it arrives, released only as far as no stop sequence
    can begin in it: what is held back is the longest tail that is the start of a stop sequence
    (with logprobs, the whole tokens it touches)."""

    def __init__(self, stops: Sequence[str], skip: int = 0) -> None:
        self._stops = stops
        self._skip = skip  # leading characters that are the vendor's echo of the prompt
        self._held: list[_Atom] = []
        self._released = 0  # characters released so far
        self.stopped = False

    def feed(self, text: str, logprobs: Logprobs | None) -> tuple[str, Logprobs | None]:
        """What can be released now. After a stop sequence, `stopped` is set and nothing more is."""
        if self.stopped:
            return "", None
        self._held.extend(_atoms(text, logprobs))
        held = "".join(atom.text for atom in self._held)
        start = max(0, self._skip - self._released)
        cut = _first_stop(held, self._stops, start)
        if cut is not None:
            self.stopped = True
            return self._release(cut, cut_here=True)
        return self._release(len(held) - _stop_prefix(held, self._stops, start))

    def flush(self) -> tuple[str, Logprobs | None]:
        """Everything held back: the text ended without a stop sequence."""
        return self._release(sum(len(atom.text) for atom in self._held))

    def cut(self, text: str, logprobs: Logprobs | None) -> tuple[str, Logprobs | None]:
        """A whole text at once."""
        head, head_logprobs = self.feed(text, logprobs)
        if self.stopped:
            return head, head_logprobs
        rest, rest_logprobs = self.flush()
        return head + rest, join_logprobs(head_logprobs, rest_logprobs)

    def _release(self, upto: int, cut_here: bool = False) -> tuple[str, Logprobs | None]:
        texts: list[str] = []
        logprobs: Logprobs | None = None
        position = done = 0
        for atom in self._held:
            end = position + len(atom.text)
            if end > upto:
                if position < upto and (cut_here or atom.logprobs is None):
                    keep = upto - position
                    texts.append(atom.text[:keep])
                    logprobs = join_logprobs(logprobs, _head(atom, keep, self._released + position))
                    atom.text = atom.text[keep:]  # held on: it carries no logprobs
                    position = upto
                break
            texts.append(atom.text)
            logprobs = join_logprobs(logprobs, _placed(atom, self._released + position))
            position = end
            done += 1
        del self._held[: len(self._held) if cut_here else done]
        self._released += position
        return "".join(texts), logprobs


def _atoms(text: str, logprobs: Logprobs | None) -> list[_Atom]:
    if logprobs is None:
        return [_Atom(text)] if text else []
    tokens = logprobs.get("tokens") or []
    columns = {key: logprobs.get(key) or [None] * len(tokens) for key in _LISTS}
    if "".join(tokens) != text or any(len(column) != len(tokens) for column in columns.values()):
        return [_Atom(text, logprobs)]  # not one entry per piece of this text: kept as one unit
    return [_Atom(token, {key: [columns[key][i]] for key in _LISTS}, token=True) for i, token in enumerate(tokens)]


def _placed(atom: _Atom, offset: int) -> Logprobs | None:
    if atom.logprobs is None or not atom.token:
        return atom.logprobs
    return atom.logprobs | {"text_offset": [offset]}


def _head(atom: _Atom, keep: int, offset: int) -> Logprobs | None:
    """The logprobs of the atom's first `keep` characters."""
    if atom.logprobs is None:
        return None
    if atom.token:
        # The shortened token keeps its logprob, and its top_logprobs entry still holds it.
        token, (logprob,), (top,) = atom.text[:keep], atom.logprobs["token_logprobs"], atom.logprobs["top_logprobs"]
        top = None if top is None else with_sampled(token, logprob, top.items())
        return atom.logprobs | {"tokens": [token], "top_logprobs": [top], "text_offset": [offset]}
    offsets = atom.logprobs.get("text_offset") or []
    count = sum(1 for at in offsets if at is not None and at < offset + keep) if offsets else None
    return {key: list((atom.logprobs.get(key) or [])[:count]) for key in _LISTS}


def _first_stop(text: str, stops: Sequence[str], start: int) -> int | None:
    """Where the stop sequence that is complete first begins (the longest one on a tie)."""
    best: tuple[int, int] | None = None
    for stop in stops:
        at = text.find(stop, start)
        if at >= 0 and (best is None or (at + len(stop), at) < best):
            best = (at + len(stop), at)
    return None if best is None else best[1]


def _stop_prefix(text: str, stops: Sequence[str], start: int) -> int:
    """The length of the longest tail of text[start:] that a stop sequence begins with."""
    longest = 0
    for stop in stops:
        at = text.find(stop[0], max(start, len(text) - len(stop) + 1))
        while at >= 0:
            if stop.startswith(text[at:]):
                longest = max(longest, len(text) - at)
                break
            at = text.find(stop[0], at + 1)
    return longest
