"""The vendor-neutral types that cross every layer: one vendor call (`CompletionCall`), what comes
back (`Choice`, `Chunk`, `Result`, `Usage`), and the record the ledger keeps of an attempt.

The helpers here are the gateway's rules for fanned-out choices, shared by the planner (which fans
a request out over vendor calls) and by adapters that fan out themselves (the embedded model):
choice *i* samples with `seed + i`, `best_of` keeps the candidates with the highest cumulative
logprob, and usage is either summed over independent calls (what the vendors bill, which the
ledger records) or counted once per prompt over candidates that read the same prompt (what the
client is told, as OpenAI counts it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

from gateway.core.clearance import CLEAR, Clearance
from gateway.core.endpoint import Endpoint

T = TypeVar("T")

DEFAULT_MAX_TOKENS = 16  # the contract's default
# The most tokens a vendor may report for one side (prompt or completion) of one call's usage. No
# model reads or writes a billion tokens in one call, so a larger count is the vendor's nonsense
# (refused: gateway/vendors/untrusted.py), never billed; summed over the most vendor calls a request
# may fan out to, counts stay far inside the ledger's BIGINT columns.
MAX_USAGE_TOKENS = 10**9
# Seconds an adapter's own tokenizer (`Attempt.count_tokens`) may take for one text before it gives
# up; the ledger's deadline for a whole estimate (store/ledger.py) is longer, so a stalled tokenizer
# never keeps a worker thread busy after the row was written without it.
COUNT_TOKENS_TIMEOUT = 5.0


class Call(Protocol):
    """A vendor call of any endpoint, as the planner, the transport and tracing read it (one per
    endpoint: `CompletionCall` here, core/chat.py `ChatCall`; each endpoint's translators read
    the rest of it). Made by the endpoint's unit, fanned out and verified by the planner."""

    endpoint: ClassVar[Endpoint]
    model: str  # the vendor's own model name (what follows "vendor/")
    # The prompts (a chat call: its conversation as text, once): what an estimate of its tokens counts.
    prompts: list[str]
    stream: bool
    served_by: list[str]  # where the vendor layer names the deployments that served it (for the ledger)
    clearance: Clearance  # the request's (core/clearance.py): awaited before a vendor is asked

    @property
    def n(self) -> int: ...

    def given(self, name: str) -> Any:
        """The value of parameter `name` when the request sets it (to other than its default), else None."""

    def most_tokens(self) -> int | None:
        """The most completion tokens the call may generate, all its choices (None: the vendor's default)."""

    def split(self, prompts: list[str], n: int, seed: int | None) -> Any:
        """The call for `prompts` of its prompts and `n` of its choices, sampled from `seed` (a fan-out's leg)."""


@dataclass(slots=True)
class CompletionCall:
    """One call to one vendor, with every contract default already applied. Its fields are the
    request parameters (core/parameters.py), with `prompt` as the list `prompts`."""

    endpoint: ClassVar[Endpoint] = Endpoint.COMPLETIONS

    model: str  # the vendor's own model name (what follows "vendor/")
    prompts: list[str]
    max_tokens: int = DEFAULT_MAX_TOKENS
    n: int = 1
    stream: bool = False
    best_of: int | None = None
    echo: bool = False
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, int] | None = None
    logprobs: int | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    suffix: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    user: str | None = None
    # Not a parameter: where the vendor layer names the deployment each vendor call was served by
    # (the ledger records them). The calls of one plan share one list.
    served_by: list[str] = field(default_factory=list)
    clearance: Clearance = CLEAR  # the request's (core/clearance.py): awaited before a vendor is asked

    def given(self, name: str) -> Any:
        """The value of parameter `name` when the request sets it to something other than its
        default, else None. `prompt` is given when there are several."""
        if name == "prompt":
            return self.prompts if len(self.prompts) > 1 else None
        value = getattr(self, name)
        return None if value == _DEFAULTS[name] else value

    def most_tokens(self) -> int | None:
        """The most completion tokens the call may generate, all its choices (best_of candidates too)."""
        return self.max_tokens * (self.best_of or self.n) * len(self.prompts)

    def split(self, prompts: list[str], n: int, seed: int | None) -> CompletionCall:
        """The call for `prompts` of its prompts and `n` of its choices, sampled from `seed` (a fan-out's leg)."""
        return dataclasses.replace(self, prompts=prompts, n=n, seed=seed)


_DEFAULTS: dict[str, Any] = {
    f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    for f in dataclasses.fields(CompletionCall)
}


@dataclass(slots=True)
class Choice:
    """One choice, or in a stream one choice's new piece. `index` counts within the call."""

    index: int
    text: str
    finish_reason: str | None = None
    logprobs: dict[str, Any] | None = None  # legacy shape: tokens, token_logprobs, top_logprobs, text_offset


@dataclass(slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    prompt_tokens_details: dict[str, Any] | None = None  # e.g. {"cached_tokens": 12}
    completion_tokens_details: dict[str, Any] | None = None  # e.g. {"reasoning_tokens": 40}
    estimated: bool = False  # counted by the gateway, not reported by the vendor

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            _add_details(self.prompt_tokens_details, other.prompt_tokens_details),
            _add_details(self.completion_tokens_details, other.completion_tokens_details),
            self.estimated or other.estimated,
        )


def summed_usage(usages: Sequence[Usage | None]) -> Usage | None:
    """The usage of independent vendor calls (each read its own prompts): every count added up.
    None when some call did not report its usage."""
    if not usages or any(u is None for u in usages):
        return None
    total = usages[0]
    for usage in usages[1:]:
        total = total + usage  # type: ignore[operator]
    return total


def candidates_usage(usages: Sequence[Usage | None]) -> Usage | None:
    """The usage of candidates generated for one prompt (n, best_of): the prompt counted once,
    since every candidate read the same one, and every candidate's completion, kept or not (it was
    generated). None when some candidate did not report its usage."""
    if not usages or any(u is None for u in usages):
        return None
    first = usages[0]
    assert first is not None
    completion = sum(u.completion_tokens for u in usages if u is not None)
    details = None
    for usage in usages:
        details = _add_details(details, usage.completion_tokens_details)  # type: ignore[union-attr]
    return Usage(first.prompt_tokens, completion, first.prompt_tokens_details, details,
                 estimated=any(u.estimated for u in usages if u is not None))


def usage_per_prompt(groups: Iterable[Sequence[Usage | None]]) -> Usage | None:
    """The usage a client is told (OpenAI's semantics) of vendor calls grouped by the prompts they
    read: within a group every call read the same prompts, which count once (candidates_usage);
    the groups are summed. None when some call did not report its usage."""
    return summed_usage([candidates_usage(group) for group in groups])


def rough_tokens(chars: int) -> int:
    """About four characters per token, the usual rule of thumb for BPE vocabularies on English
    text: the estimate when nothing better is at hand (the gateway cut a vendor call short, or
    counting did not finish in time)."""
    return -(-chars // 4)


def choice_seed(seed: int | None, choice: int) -> int | None:
    """The seed choice `choice` samples with: distinct samples for each of n, still reproducible."""
    return None if seed is None else seed + choice


def best_candidates(candidates: Iterable[T], n: int, score: Callable[[T], float]) -> list[T]:
    """The `n` candidates with the highest score (their cumulative logprob), best first; ties keep
    the order they came in."""
    return sorted(candidates, key=score, reverse=True)[:n]


def completion_logprob(token_logprobs: Iterable[float | None]) -> float:
    """The log-probability of a whole completion from its tokens' (one without counts for
    nothing): what `best_of` ranks candidates by."""
    return sum(lp for lp in token_logprobs if lp is not None)


def cumulative_logprob(logprobs: dict[str, Any] | None) -> float | None:
    """A choice's cumulative logprob from its legacy logprobs (None when it has none)."""
    if logprobs is None:
        return None
    return completion_logprob(logprobs.get("token_logprobs") or ())


@dataclass(slots=True)
class Result:
    choices: list[Choice]
    # What the client is told: each prompt counted once (OpenAI's semantics), however many vendor
    # calls its choices took. An adapter's own answer is one call, so it sets only this.
    usage: Usage | None = None
    system_fingerprint: str | None = None
    # What the vendor calls reported, summed (a prompt counted per call that read it): what the
    # ledger records. Set by the planner, which merges the calls.
    billed: Usage | None = None


@dataclass(slots=True)
class Chunk:
    choices: list[Choice]
    usage: Usage | None = None  # set on the vendor's final usage chunk (what the client is told)
    billed: Usage | None = None  # the planner's final chunk: what the vendor calls reported, summed


@dataclass(frozen=True, slots=True)
class Attempt:
    """What the usage ledger records about the vendor calls that serve a request on one model
    (a fallback is a new attempt). Built by the planner, so storage needs nothing of it."""

    vendor: str  # the configured vendor name
    model: str  # "vendor/name", as the client (or the fallback chain) wrote it
    streamed: bool
    end_user: str | None  # the request's `user`, whether or not the vendor was sent it
    prompts_sent: tuple[str, ...]  # each prompt as often as it went to the vendor, for an estimate
    max_completion_tokens: int | None = None  # the most the vendor calls could generate, which caps an estimate
    vendor_calls: int = 1  # how many calls the prompts were spread over (a price's long-prompt tier is per call)
    # The model's own tokenizer when the adapter has one; else the ledger counts with an OpenAI
    # vocabulary (store/tokens.py). Called from a worker thread.
    count_tokens: Callable[[str], int] | None = None
    # The deployments that served the vendor calls (configured name or index), filled in as they
    # answer: the plan's calls' `served_by`.
    served_by: Sequence[str] = ()
    endpoint: Endpoint = Endpoint.COMPLETIONS  # the endpoint the request came through


def _add_details(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    if a is None or b is None:
        return a or b
    merged = dict(a)
    for key, value in b.items():
        if isinstance(value, int) and isinstance(merged.get(key), int):
            merged[key] += value
        else:
            merged.setdefault(key, value)
    return merged
