"""Each request parameter, per vendor: native, emulated by the gateway, or unsupported.

One function (`verdict`) decides, from an adapter's `Capabilities`. The planner enforces it
before any vendor call (`check`), GET /v5/vendors shows it and docs/capabilities.md prints it,
so the behaviour, the operation and the README table cannot disagree. Nothing is accepted and
ignored: a parameter no vendor and no emulation can serve is a 400 naming it and the vendor, a
value outside the vendor's range is a 400 naming the range (never clamped).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gateway.emulation import Emulation
from gateway.errors import ParameterOutOfRange, UnsupportedParameter
from vendors.base import PARAMETERS, Adapter, Capabilities, CompletionCall, Range

NATIVE, EMULATED, UNSUPPORTED = "native", "emulated", "unsupported"

# What the gateway does itself for a parameter the vendor lacks (gateway/emulation.py,
# gateway/planning.py). A parameter with no entry here cannot be emulated.
EMULATIONS = {
    "prompt": "a list of prompts becomes one vendor call per prompt, run concurrently",
    "n": "one vendor call per choice, run concurrently; choice i samples with seed + i when a seed is given",
    "echo": "the gateway prepends the prompt to each choice (not together with logprobs: "
            "the vendor cannot score the prompt's tokens)",
    "stop": "the gateway matches the stop sequences in the generated text, also across stream chunks, "
            "cuts the text before the first one and ends the vendor call",
    "best_of": "the gateway generates best_of candidates per prompt and returns the n with the highest "
               "cumulative logprob; usage counts every candidate",
    "user": "recorded with the request in the gateway's usage ledger; the vendor has no end-user field",
}  # fmt: skip
# Emulations that need another parameter served natively, and why.
_NEEDS = {
    "best_of": ("logprobs", "ranking candidates needs token logprobs, which the vendor does not return"),
}
_CANNOT = "the vendor does not offer it and the gateway cannot emulate it"


@dataclass(frozen=True, slots=True)
class Verdict:
    support: str  # NATIVE | EMULATED | UNSUPPORTED
    detail: str | None = None  # how it is emulated, why it is unsupported, or a per-call limit
    range: Range | None = None  # the vendor's accepted values, when narrower than the contract's
    limit: int | None = None  # per vendor call (prompt list length, n, stop sequences); beyond it, emulated


def verdicts(caps: Capabilities) -> dict[str, Verdict]:
    """Every parameter's verdict, `prompt` (list prompts) first."""
    return {name: verdict(caps, name) for name in ("prompt", *PARAMETERS)}


def verdict(caps: Capabilities, name: str) -> Verdict:
    if name in caps.unsupported:
        return Verdict(UNSUPPORTED, caps.unsupported[name])
    attribute, none = _PER_CALL.get(name, (None, None))
    limit = getattr(caps, attribute) if attribute else None
    if (name in caps.native or name == "prompt") and (limit is None or limit != none):
        detail = None if limit is None else f"up to {limit} per vendor call; {_BEYOND[name]}"
        return Verdict(NATIVE, detail, caps.ranges.get(name), limit)
    needed = _NEEDS.get(name)
    if needed is not None and verdict(caps, needed[0]).support != NATIVE:
        return Verdict(UNSUPPORTED, needed[1])
    if name in EMULATIONS:
        return Verdict(EMULATED, EMULATIONS[name])
    return Verdict(UNSUPPORTED, _CANNOT)


# Parameters with a per-call limit: the Capabilities field, and the limit that means "not at all".
_PER_CALL = {"prompt": ("prompts_per_call", 1), "n": ("n_per_call", 1), "stop": ("max_stop", 0)}
_BEYOND = {
    "prompt": "longer lists are split over concurrent vendor calls",
    "n": "more choices are split over concurrent vendor calls",
    "stop": "a longer list is matched by the gateway",
}


def used_parameters(call: CompletionCall) -> Iterable[str]:
    """The parameters whose value asks a vendor for something beyond plain generation."""
    if len(call.prompts) > 1:
        yield "prompt"
    if call.n != 1:
        yield "n"
    if call.best_of is not None:
        yield "best_of"
    if call.echo:
        yield "echo"
    if call.stop:
        yield "stop"
    if call.logit_bias:
        yield "logit_bias"
    for name in ("frequency_penalty", "presence_penalty", "logprobs", "seed", "suffix", "temperature", "top_p", "user"):
        if getattr(call, name) is not None:
            yield name


def check(adapter: Adapter, call: CompletionCall) -> Emulation:
    """Reject what the vendor cannot be given (400 naming parameter and vendor), and say what
    the gateway must emulate for this request."""
    caps, vendor = adapter.capabilities, adapter.name
    emulated = set()
    for name in used_parameters(call):
        found = verdict(caps, name)
        if found.support == UNSUPPORTED:
            raise UnsupportedParameter(name, vendor, found.detail or _CANNOT)
        if found.range is not None and getattr(call, name) not in found.range:
            raise ParameterOutOfRange(name, vendor, getattr(call, name), str(found.range))
        if found.support == EMULATED or (name == "stop" and found.limit is not None and len(call.stop) > found.limit):
            emulated.add(name)
    if "echo" in emulated and call.logprobs is not None:
        raise UnsupportedParameter(
            "echo", vendor, "echo together with logprobs needs the vendor to score the prompt's tokens, which it cannot"
        )
    return Emulation(
        echo="echo" in emulated,
        stop=tuple(call.stop) if "stop" in emulated else (),
        best_of=call.best_of if "best_of" in emulated else None,
        logprobs=call.logprobs is not None,
        vendor_echoes=call.echo and "echo" not in emulated,
        user_recorded="user" in emulated,
    )
