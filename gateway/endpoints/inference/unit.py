"""The vendor-native endpoint's unit (endpoints/unit.py `EndpointUnit`): the contract's
`InferenceRequest`, planned by plan.py on the protocol's translator, its demand the text of `args`
and the protocol's own output bound (bounds.py; a budget needs one: `Demand.unbounded`), its
answer the vendor's JSON as `generic_inference`, a stream each vendor event as
`generic_inference.chunk` (answers.py). Never cached: the gateway cannot tell from a native body
whether the same request gives the same answer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.clearance import Clearance
from gateway.core.completion import Choice, Result, Usage
from gateway.core.demand import Demand
from gateway.core.endpoint import Endpoint
from gateway.core.errors import BadRequest
from gateway.core.inference import NativeChoice
from gateway.endpoints.inference import answers, texts
from gateway.endpoints.inference.bounds import reserved_output
from gateway.endpoints.inference.plan import InferencePlan, plan_inference
from gateway.vendors.registry import Registry
from generated.models import InferenceRequest


@dataclass(frozen=True, slots=True)
class AskedInference:
    """A vendor-native request as its unit accepted it: the model, `args` (absent: `{}`) and the
    client's `inference_configuration` as JSON values."""

    model: str
    args: dict[str, Any]
    configuration: dict[str, Any]


class Shape:
    """A stream's events: each vendor event's `generic_inference.chunk`, alone in its event
    (http/answer_stream.py writes what `event` gives instead of a choices chunk)."""

    def piece(self, choice: Choice, finish: str | None) -> dict[str, Any] | None:
        return choice.response if isinstance(choice, NativeChoice) else None

    def closing(self, index: int) -> dict[str, Any]:
        raise AssertionError("a native stream has no choices of the gateway's to close")  # plan.choices is 0

    def event(self, pieces: list[dict[str, Any]]) -> bytes:
        return b"".join(b"data: " + orjson.dumps(piece) + b"\n\n" for piece in pieces)


class Inference:
    endpoint = Endpoint.INFERENCE
    id_prefix = "inf-"
    answer_object = answers.OBJECT
    chunk_object = answers.CHUNK_OBJECT

    def accepted(self, request: InferenceRequest) -> AskedInference:
        body = request.model_dump(by_alias=True)
        return AskedInference(request.model, dict(body.get("args") or {}),
                              dict(body.get("inference_configuration") or {}))

    def cache_form(self, asked: AskedInference) -> Mapping[str, Any]:
        return None  # type: ignore[return-value]  # http/cache.py: no form, no cache (module docstring)

    def plan(self, asked: AskedInference, model: str, registry: Registry, max_vendor_calls: int,
             clearance: Clearance) -> InferencePlan:
        return plan_inference(asked.args, model, asked.model, asked.configuration, registry, clearance)

    def demand(self, asked: AskedInference, plan: InferencePlan | None, falls_back: bool) -> Demand:
        """The text of `args` and the most the vendor may generate, by the protocol's own bound (a
        fallback speaks the same protocol: the same bound). Without a bound, a budget cannot
        reserve it: `unbounded` is the 400 naming the member to set, raised by the limits when
        one applies. Without a plan (the request is refused anyway), no tokens."""
        prompts = [texts.prompt_text(asked.args)]
        completion, unbounded = 0, None
        if plan is not None:
            try:
                completion = reserved_output(plan.wire, asked.args, vendor=plan.adapter.name).tokens
            except BadRequest as exc:
                unbounded = exc
        return Demand(Endpoint.INFERENCE, asked.model, prompts, completion, plan is not None and plan.stream,
                      unbounded=unbounded)

    def body(self, head: Mapping[str, Any], plan: InferencePlan, result: Result, usage: Usage) -> bytes:
        choice = result.choices[0]
        assert isinstance(choice, NativeChoice)
        return orjson.dumps(choice.response)

    def shape(self) -> Shape:
        return Shape()


UNIT = Inference()
