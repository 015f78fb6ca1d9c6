"""The vendor adapter protocol, and the vendor-neutral types that cross it.

An adapter speaks one vendor wire protocol. It turns a `CompletionCall` into vendor requests and
the vendor's answers back into `Choice`s, `Chunk`s and `Usage`. It knows nothing of the HTTP
server, accounts or the ledger; the planner (gateway/planning.py) decides what each call asks for,
after checking the adapter's `Capabilities`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

# The request parameters a vendor may or may not support. `model`, `prompt`, `stream` and
# `stream_options` are the gateway's own business for every vendor (it always asks for usage and
# forwards the usage chunk only when `stream_options.include_usage` asks for it).
PARAMETERS = (
    "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
    "presence_penalty", "seed", "stop", "suffix", "temperature", "top_p", "user",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Range:
    """The values a vendor accepts for a parameter, when narrower than the contract's."""

    minimum: float
    maximum: float

    def __contains__(self, value: float) -> bool:
        return self.minimum <= value <= self.maximum

    def __str__(self) -> str:
        return f"[{_number(self.minimum)}, {_number(self.maximum)}]"


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a vendor does with each request parameter, as data.

    `native` parameters go to the vendor as they are. Any other parameter a request uses is
    emulated by the gateway when an emulation exists (gateway/capabilities.py), unless
    `unsupported` names it with the reason it cannot be served, which becomes a 400 naming
    parameter and vendor. `ranges` narrows the contract's range of a native parameter (a value
    outside is a 400, never clamped). gateway/capabilities.py turns this into the verdict per
    parameter that the planner enforces, GET /v5/vendors shows and docs/capabilities.md prints.
    """

    native: frozenset[str]
    unsupported: Mapping[str, str] = field(default_factory=dict)
    ranges: Mapping[str, Range] = field(default_factory=dict)
    prompts_per_call: int | None = None  # None: a list of any length in one call
    n_per_call: int | None = None  # None: any n in one call
    max_stop: int | None = None  # stop sequences per call; None: as many as the contract allows


@dataclass(slots=True)
class CompletionCall:
    """One call to one vendor, with every contract default already applied."""

    model: str  # the vendor's own model name (what follows "vendor/")
    prompts: list[str]
    max_tokens: int = 16
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


@dataclass(slots=True)
class Result:
    choices: list[Choice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


@dataclass(slots=True)
class Chunk:
    choices: list[Choice]
    usage: Usage | None = None  # set on the vendor's final usage chunk


class Adapter(Protocol):
    protocol: ClassVar[str]
    name: str  # the configured vendor name, the part before "/" in `model`
    capabilities: Capabilities

    async def start(self) -> None:
        """Open pools, load models. Called once by the app's lifespan."""

    async def close(self) -> None:
        """Release everything start() acquired."""

    def not_ready(self) -> str | None:
        """None when requests can be served, else why not (shown by /readyz)."""

    async def complete(self, call: CompletionCall) -> Result: ...

    def stream(self, call: CompletionCall) -> AsyncIterator[Chunk]:
        """Chunks as the vendor produces them; the last one carries the usage."""


@runtime_checkable
class CountsTokens(Protocol):
    """Optional for an adapter: count tokens with the model's own tokenizer.

    The gateway counts tokens itself only when the vendor did not report usage (a stream cut
    short, a vendor without usage); the row is then marked estimated. Adapters without this
    method are counted with an OpenAI vocabulary (gateway/tokens.py). Called from a worker
    thread, so it must not touch the event loop."""

    def count_tokens(self, model: str, text: str) -> int: ...


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


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
