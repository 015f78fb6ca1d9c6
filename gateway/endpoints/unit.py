"""What an endpoint's unit gives the request's way (http/serving.py), and what its plans give it.

The way is the same for every endpoint: the handler parses the body into the contract's request
model and hands it to `serve` with the endpoint's `UNIT`; `serve` takes the unit's request rules
(`accepted`), its cache form, opens the request's lifecycle, plans it (`plan`, on the model or a
fallback's, through `Planning`), asks the limits for its `demand`, starts the vendor call and writes
the unit's answer (`body`, or a stream in the unit's `shape`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from pydantic import MISSING, BaseModel

from gateway.core.clearance import Clearance
from gateway.core.completion import Attempt, Choice, Chunk, Result, Usage
from gateway.core.demand import Demand
from gateway.core.endpoint import Endpoint
from gateway.vendors.registry import Registry


class Planned(Protocol):
    """A request's plan, as the way reads it (planner/plan.py `Plan`)."""

    model: str  # as the client wrote it, or the fallback's
    prompts: list[str]  # what an estimate of the prompt's tokens counts
    include_usage: bool

    @property
    def stream(self) -> bool: ...

    @property
    def vendor_calls(self) -> int: ...

    @property
    def choices(self) -> int:
        """How many choices the client's answer has."""

    def echoed(self, index: int) -> str:
        """What choice `index` starts with that is not its own generated text (an echoed prompt)."""

    def attempt(self) -> Attempt: ...

    async def complete(self) -> Result: ...

    def chunks(self) -> AsyncIterator[list[Chunk]]: ...


class OneCall:
    """What a plan of one vendor call of the vendor's own body says of itself (a mixin of the
    vendor-native plans: endpoints/inference/plan.py, endpoints/responses/native_plan.py): its
    `call`'s prompts and stream, one call, nothing echoed."""

    __slots__ = ()
    call: Any

    @property
    def prompts(self) -> list[str]:
        return self.call.prompts

    @property
    def stream(self) -> bool:
        return self.call.stream

    @property
    def vendor_calls(self) -> int:
        return 1

    def echoed(self, index: int) -> str:
        return ""


class Asked(Protocol):
    """A request as its unit accepted it (its rules kept): the model it asks for."""

    @property
    def model(self) -> str: ...


class Shape(Protocol):
    """How one endpoint writes a stream's choices (http/answer_stream.py reads it). A shape may also
    have `event(pieces) -> bytes`, writing its pieces as whole events of their own instead of a
    chunk's choices (the vendor-native endpoint's: endpoints/inference/unit.py)."""

    def piece(self, choice: Choice, finish: str | None) -> dict[str, Any] | None:
        """A chunk's choice as the client reads it; None when it says nothing (no text, no finish)."""

    def closing(self, index: int) -> dict[str, Any]:
        """The choice that ends choice `index`, which the vendor never closed."""


M = TypeVar("M", contravariant=True)  # the contract's request model, as the handler parsed it
A = TypeVar("A", bound=Asked)
P = TypeVar("P", bound=Planned)


class EndpointUnit(Protocol[M, A, P]):
    endpoint: Endpoint
    id_prefix: str  # of its answers' ids: "cmpl-", "chatcmpl-"
    answer_object: str  # the `object` of a whole answer
    chunk_object: str  # the `object` of a stream's chunk

    def accepted(self, request: M) -> A:
        """The request, its rules the schema cannot say kept (a 422 or 400 naming the field)."""

    def cache_form(self, asked: A) -> Mapping[str, Any]:
        """The request's canonical form (http/cache.py): what makes its answer what it is."""

    def plan(self, asked: A, model: str, registry: Registry, max_vendor_calls: int, clearance: Clearance) -> P:
        """The vendor calls that serve `asked` on `model` (its own, or a fallback's)."""

    def demand(self, asked: A, plan: P | None, falls_back: bool) -> Demand:
        """The most the request can cost: with its `plan` on its own model, or without one (the
        planner refused it, or a fallback may serve it) a bound that holds for any vendor."""

    def body(self, head: Mapping[str, Any], plan: P, result: Result, usage: Usage) -> bytes:
        """A whole answer, encoded, of `head` (its id, created and model)."""

    def shape(self) -> Shape:
        """How a stream's choices are written (one per stream: it may keep what it wrote), by the
        chunk stream (http/answer_stream.py). An endpoint whose stream has a writer of its own
        (http/serving.py `_STREAMS`: the Responses events) is never asked."""


@dataclass(slots=True)
class Planning(Generic[A, P]):
    """One request as its endpoint plans it, on its own model or, for a fallback, on another
    (planner/fallbacks.py re-plans through it): the unit, the accepted request, and what every
    plan of it shares."""

    unit: EndpointUnit[Any, A, P]
    asked: A
    registry: Registry
    max_vendor_calls: int
    clearance: Clearance

    def plan(self, model: str) -> P:
        return self.unit.plan(self.asked, model, self.registry, self.max_vendor_calls, self.clearance)


# The request's fields that say how its answer is delivered or whom it is attributed to, not what it is.
LEFT_OUT = frozenset({"model", "stream", "stream_options", "user"})
_ABSENT = object()


def contract_defaults(request_model: type[BaseModel]) -> dict[str, Any]:
    """What the contract says a request field left out means (its `default` in openapi.json), by
    the fields' names on the wire, read from the generated model: the contract is their one source.
    They are what the gateway serves a field left out as; they never become values the client set
    (`given`): a vendor is sent only what the client set (or the translator's own choice)."""
    return {field.alias or name: field.get_default(call_default_factory=True)
            for name, field in request_model.model_fields.items()
            if not field.is_required() and field.default is not MISSING and field.default is not None}


def given(request: BaseModel) -> dict[str, Any]:
    """The request's fields the client set (null included: "not set" to the planner), by their
    names on the wire, as JSON values; the contract's defaults of the others are left out."""
    return request.model_dump(by_alias=True, include=request.model_fields_set)


def cache_form(body: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical fields of a validated request body (http/cache.py): what is null, the
    contract's default or left out (LEFT_OUT) is not there (`best_of` equal to `n` is no ranking
    either), and a whole float is written as an integer (JSON's 1.0 is 1; nested values are taken
    as they are)."""
    n = body.get("n") or 1
    return {name: int(value) if value.__class__ is float and value.is_integer() else value
            for name, value in body.items()
            if name not in LEFT_OUT and value is not None and defaults.get(name, _ABSENT) != value
            and not (name == "best_of" and value == n)}
