"""The request parameters, and what a vendor protocol does with each one, as data.

`PARAMETERS` is derived from the generated `CompletionRequest` (openapi.json), less the fields
that are the gateway's own business for every vendor (`model`, `stream`, `stream_options`: the
gateway always asks for usage and forwards the usage chunk only when the client asked). A new
property in the contract is therefore a new parameter, and `Capabilities` refuses an adapter
that does not say what it does with it: it fails closed, naming the property.

Every adapter declares exactly one `Support` record per parameter:
- `native()`: the vendor is sent it, optionally within a narrower `range` (a value outside is a
  400, never clamped) and at most `per_call` prompts, choices or stop sequences per vendor call
  (beyond that the gateway fans out or matches itself);
- `emulated()`: the gateway does it (only for the parameters in `EMULATABLE`);
- `unsupported(reason)`: a request using it is a 400 naming parameter, vendor and reason.
The planner (planner/capabilities.py) turns these records into the verdict it enforces, that
GET /v5/vendors shows and docs/capabilities.md prints.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel

from generated.models import ChatCompletionRequest, CompletionRequest

# Fields every vendor leaves to the gateway.
GATEWAY_FIELDS = frozenset({"model", "stream", "stream_options"})


def request_parameters(request_model: type[BaseModel]) -> tuple[str, ...]:
    """The parameters of a request model, by their names on the wire: its fields less the gateway's
    own, what is asked of the model first (`prompt`, as a parameter "a list of prompts"; `messages`),
    then the rest alphabetically."""
    names = {field.alias or name for name, field in request_model.model_fields.items()}
    return tuple(sorted(names - GATEWAY_FIELDS, key=lambda name: (name not in ("prompt", "messages"), name)))


PARAMETERS: tuple[str, ...] = request_parameters(CompletionRequest)
# Parameters the planner knows how to emulate (planner/emulation.py, planner/plan.py describe how).
EMULATABLE = frozenset({"prompt", "n", "echo", "stop", "best_of", "user"})
# POST /v5/chat/completions: its parameters (`messages` among them: a vendor that serves no chat
# declares it unsupported), and what the gateway emulates of them (planner/capabilities.py `check_chat`).
CHAT_PARAMETERS: tuple[str, ...] = request_parameters(ChatCompletionRequest)
CHAT_EMULATABLE = frozenset({"user", "n"})
# Parameters whose support may be limited per vendor call: list prompts, choices, stop sequences.
PER_CALL = frozenset({"prompt", "n", "stop"})

NATIVE, EMULATED, UNSUPPORTED = "native", "emulated", "unsupported"


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
class Support:
    """One parameter on one vendor. `detail` says why it is unsupported, or (once the planner has
    judged it) how it is emulated or what its per-call limit means."""

    kind: str  # NATIVE | EMULATED | UNSUPPORTED
    detail: str | None = None
    range: Range | None = None
    per_call: int | None = None


# A count a vendor takes from 1 (max_tokens on most vendors: 0 is then emulated, planner/capabilities.py).
AT_LEAST_ONE = Range(1, 2**31 - 1)


def native(range: Range | None = None, per_call: int | None = None) -> Support:
    return Support(NATIVE, range=range, per_call=per_call)


def emulated() -> Support:
    return Support(EMULATED)


def unsupported(reason: str) -> Support:
    return Support(UNSUPPORTED, reason)


def no_chat(protocol: str, reason: str) -> Capabilities:
    """The chat record of a protocol whose adapter serves no chat (yet): `messages`, which every chat
    request uses, is unsupported for `reason`, and so is every other parameter."""
    return Capabilities.chat(protocol, {name: unsupported(reason) for name in CHAT_PARAMETERS})


class IncompleteCapabilities(TypeError):
    """An adapter's declaration does not cover the contract's parameters exactly (a programming
    error: raised when the adapter is built, so the gateway does not start and tests fail)."""


@dataclass(frozen=True, slots=True)
class Capabilities(Mapping[str, Support]):
    """A vendor protocol's support record for every parameter of one endpoint (completions by
    default; `chat()` for chat completions), checked when it is made."""

    protocol: str
    support: Mapping[str, Support] = field(default_factory=dict)
    parameters: tuple[str, ...] = ()  # () : the completion parameters (PARAMETERS)
    emulatable: frozenset[str] = frozenset()  # with the completion parameters, EMULATABLE

    @classmethod
    def chat(cls, protocol: str, support: Mapping[str, Support]) -> Capabilities:
        return cls(protocol, support, CHAT_PARAMETERS, CHAT_EMULATABLE)

    def __post_init__(self) -> None:
        if not self.parameters:  # read now, not when the class was made: the contract's current list
            object.__setattr__(self, "parameters", PARAMETERS)
            object.__setattr__(self, "emulatable", EMULATABLE)
        missing = [name for name in self.parameters if name not in self.support]
        if missing:
            raise IncompleteCapabilities(
                f"protocol {self.protocol!r} declares no support for request parameter(s) {', '.join(missing)}: "
                "say whether each is native(), emulated() or unsupported(reason)")
        unknown = sorted(set(self.support) - set(self.parameters))
        if unknown:
            raise IncompleteCapabilities(
                f"protocol {self.protocol!r} declares unknown parameter(s) {', '.join(unknown)}")
        for name, found in self.support.items():
            if found.kind == EMULATED and name not in self.emulatable:
                raise IncompleteCapabilities(f"protocol {self.protocol!r}: the gateway cannot emulate {name!r}")
            if found.kind == UNSUPPORTED and not found.detail:
                raise IncompleteCapabilities(f"protocol {self.protocol!r}: unsupported {name!r} needs a reason")
            if found.per_call is not None and (name not in PER_CALL or found.per_call < 1):
                raise IncompleteCapabilities(f"protocol {self.protocol!r}: {name!r} cannot have a per-call limit "
                                             f"of {found.per_call}")

    def __getitem__(self, name: str) -> Support:
        return self.support[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.parameters)

    def __len__(self) -> int:
        return len(self.parameters)

    @property
    def native(self) -> frozenset[str]:
        return frozenset(name for name, found in self.support.items() if found.kind == NATIVE)

    def per_call(self, name: str) -> int | None:
        """How many prompts / choices / stop sequences one vendor call takes: None for any number,
        1 (prompts, choices) or 0 (stop sequences) when the vendor does not take the parameter."""
        found = self.support[name]
        if found.kind != NATIVE:
            return 0 if name == "stop" else 1
        return found.per_call


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
