"""Each request parameter, per vendor: native, emulated by the gateway, or unsupported.

One function (`verdict`) judges an adapter's declared `Support` records (gateway/core/parameters.py)
against what the gateway can do. The planner enforces it before any vendor call (`check`),
GET /v5/vendors shows it and docs/capabilities.md prints it, so the behaviour, the operation and
the README table cannot disagree. Each endpoint's parameters are judged by the one `verdict`:
completions' by `check` (which also says the emulations a request needs), chat's by `check_chat`. Nothing is accepted and ignored: a parameter neither the vendor
nor an emulation can serve is a 400 naming it and the vendor, a value outside the vendor's range
is a 400 naming the range (never clamped).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gateway.core.chat import ChatCall
from gateway.core.completion import CompletionCall
from gateway.core.errors import ParameterOutOfRange, UnsupportedParameter
from gateway.core.parameters import EMULATABLE, EMULATED, NATIVE, PARAMETERS, UNSUPPORTED, Capabilities, Support
from gateway.planner.emulation import Emulation
from gateway.vendors.base import Adapter, Translator

# How the gateway emulates each parameter it can (planner/emulation.py, planner/plan.py).
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
if set(EMULATIONS) != EMULATABLE:  # the kernel's list of what adapters may declare emulated
    raise AssertionError(f"EMULATIONS and gateway.core.parameters.EMULATABLE differ: {set(EMULATIONS) ^ EMULATABLE}")
# Emulations that need another parameter served natively, and why.
_NEEDS = {
    "best_of": ("logprobs", "ranking candidates needs token logprobs, which the vendor does not return"),
}
_BEYOND = {
    "prompt": "longer lists are split over concurrent vendor calls",
    "n": "more choices are split over concurrent vendor calls",
    "stop": "a longer list is matched by the gateway",
}
# Values below a vendor's range that the gateway serves itself: the value, and how.
BELOW = {
    "max_tokens": (0, "0 is emulated: the vendor is asked for 1 token, which the gateway drops (its usage is "
                      "kept: the vendor generated it)"),
}


def verdicts(caps: Capabilities) -> dict[str, Support]:
    """Every parameter's verdict, `prompt` (list prompts) first."""
    return {name: verdict(caps, name) for name in caps}


def verdict(caps: Capabilities, name: str) -> Support:
    """The declared support, judged: an emulation whose prerequisite the vendor lacks is
    unsupported, and `detail` says how a parameter is emulated or what a per-call limit means."""
    declared = caps[name]
    if declared.kind == NATIVE:
        limit = declared.per_call
        detail = None if limit is None else f"up to {limit} per vendor call; {_BEYOND[name]}"
        if served_below(name, declared) is not None:
            detail = BELOW[name][1]
        return Support(NATIVE, detail, declared.range, limit)
    if declared.kind == EMULATED:
        needed = _NEEDS.get(name)
        if needed is not None and caps[needed[0]].kind != NATIVE:
            return Support(UNSUPPORTED, needed[1])
        return Support(EMULATED, EMULATIONS[name])
    return declared


def used_parameters(call: CompletionCall) -> Iterator[str]:
    """The parameters whose value asks a vendor for something beyond plain generation."""
    return (name for name in PARAMETERS if call.given(name) is not None)


def check(adapter: Adapter, translator: Translator[CompletionCall], call: CompletionCall) -> Emulation:
    """Reject what the vendor cannot be given (400 naming parameter and vendor), and say what
    the gateway must emulate for this request."""
    caps, vendor = translator.capabilities, adapter.name
    emulated = set()
    for name in used_parameters(call):
        found = verdict(caps, name)
        if found.kind == UNSUPPORTED:
            raise UnsupportedParameter(name, vendor, found.detail or "")
        value = call.given(name)
        if found.range is not None and value not in found.range:
            if value == served_below(name, found):
                emulated.add(name)
                continue
            raise ParameterOutOfRange(name, vendor, value, str(found.range))
        beyond_per_call = name == "stop" and found.per_call is not None and len(call.stop) > found.per_call
        if found.kind == EMULATED or beyond_per_call:
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
        no_tokens="max_tokens" in emulated,
    )


# Chat values that ask a vendor for nothing beyond its default: a vendor lacking the parameter serves
# them as it is (the parameter is not sent), so clients that spell out defaults work everywhere.
AS_IF_UNSET: dict[str, Any] = {
    "n": 1,
    "response_format": {"type": "text"},
    "parallel_tool_calls": True,
    "logprobs": False,
    "store": False,
    "frequency_penalty": 0,
    "presence_penalty": 0,
}


def check_chat(adapter: Adapter, translator: Translator[ChatCall], call: ChatCall) -> set[str]:
    """Refuse what the vendor cannot be given (400 naming parameter and vendor); the parameters the
    gateway serves itself (`user` recorded, `n` fanned out) or that ask for nothing (AS_IF_UNSET):
    never sent to the vendor. A translator may refuse values its record cannot say (`refused`: an
    image it cannot take, say)."""
    caps, vendor = translator.capabilities, adapter.name
    served_here = set()
    for name in ("messages", *call.parameters):
        found = verdict(caps, name)
        value = call.given(name)
        if found.kind != NATIVE and name in AS_IF_UNSET and value == AS_IF_UNSET[name]:
            served_here.add(name)
            continue
        if found.kind == UNSUPPORTED:
            raise UnsupportedParameter(name, vendor, found.detail or "")
        if found.range is not None and value not in found.range:
            raise ParameterOutOfRange(name, vendor, value, str(found.range))
        if found.kind == EMULATED:
            served_here.add(name)
    refused = getattr(translator, "refused", None)  # vendors.base.RefusesValues
    if refused is not None and (why := refused(call)) is not None:
        raise UnsupportedParameter(why[0], vendor, why[1])
    return served_here


def served_below(name: str, found: Support) -> int | None:
    """The value below `found`'s range that the gateway serves itself (None: none is)."""
    below = BELOW.get(name)
    return below[0] if below is not None and found.range is not None and below[0] < found.range.minimum else None
