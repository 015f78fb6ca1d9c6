"""A request that calls vendors, served the one way every such endpoint serves it, parameterised
by the endpoint's unit (endpoints/unit.py `EndpointUnit`, each endpoint's `UNIT`):

    handler      parses the body into the contract's request model (`asked`)
    unit         keeps the request's rules (`accepted`); its cache form is looked up (http/cache.py)
    lifecycle    opens (admission, the meter, the request's clearance: http/lifecycle.py)
    planner      plans it on its model (`unit.plan`, the calls carrying the clearance)
    limits       are asked for the unit's `demand` (with the plan's fan-out; without, when the
                 planner refused it: a limit's refusal answers before the request's own mistake)
    vendor       the plan starts, on a fallback when the model fails (re-planned through the unit)
    answer       whole (`unit.body`) or streamed (`unit.shape`), and the ledger's row as it ends

Anything raised on the way goes to the lifecycle's `fail`, which answers it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pydantic
from pydantic import BaseModel
from starlette.responses import Response

from gateway.core.completion import Result
from gateway.core.endpoint import Endpoint
from gateway.core.errors import GatewayError, ValidationFailed
from gateway.core.ids import ids
from gateway.core.model_names import resolved
from gateway.endpoints.unit import EndpointUnit, P, Planning
from gateway.http import cache
from gateway.http.answer_stream import EventStream
from gateway.http.cache_relay import Relay
from gateway.http.context import HandlerRequest
from gateway.http.lifecycle import Lifecycle
from gateway.http.response_events import ResponseEvents
from gateway.http.server import security
from gateway.planner import fallbacks

M = TypeVar("M", bound=BaseModel)
_REFUSALS = (GatewayError, ValidationFailed)  # what planning answers a request it will not serve with
# A stream's writer, by endpoint: the Responses API's events are not chunks of choices.
_STREAMS: dict[Endpoint, Any] = {Endpoint.RESPONSES: ResponseEvents}


def asked(request: HandlerRequest, model: type[M]) -> M:
    """The request's body as the contract's `model`, its model an alias no more (core/model_names.py:
    the limits, cache, plan, answer and ledger see the model it names). The schema validator has
    accepted the body already; pydantic's regex and number semantics can still differ at the
    edges, and that must be a 422 too. What a caller may not ask at all is refused first: its own
    vendor key, an account its key does not grant (400, 403)."""
    security.refuse_callers_vendor_key(request.headers)
    request.caller.account(request.headers.get("x-selected-account-id"))
    settings = request.services.settings
    body = request.body
    body["model"] = resolved(body["model"], settings.aliases, settings.vendors)
    try:
        return model.model_validate(body)
    except pydantic.ValidationError as exc:
        detail = [{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        raise ValidationFailed(detail) from None


async def serve(request: HandlerRequest, unit: EndpointUnit[M, Any, P], parsed: M) -> Response:
    """Serve `parsed`, the request as the contract's model, the way `unit`'s endpoint serves it:
    from the response cache when it holds the answer, else from a vendor (its answer kept in the
    cache where the lookup says)."""
    services = request.services
    account = request.caller.account(request.headers.get("x-selected-account-id"))
    accepted = unit.accepted(parsed)
    requested = accepted.model
    looked = await cache.look_up(request, account, unit.endpoint, requested, lambda: unit.cache_form(accepted))
    life = Lifecycle(request, f"{unit.id_prefix}{ids.next()}", account)  # 128 random bits (core/ids.py)
    try:
        settings = services.settings
        planning = Planning(unit, accepted, services.registry, settings.max_vendor_calls, life.clearance)
        planned: P | GatewayError | ValidationFailed
        try:
            planned = planning.plan(requested)
        except _REFUSALS as refused:  # the client's mistake, or no such vendor
            planned = refused
        plan = None if isinstance(planned, _REFUSALS) else planned
        # Asked in any case: a limit's refusal answers before the request's own mistake.
        life.ask(looked.demand(unit.demand(accepted, plan, requested in settings.fallbacks)))
        if plan is None:
            raise planned  # type: ignore[misc]
        head = {"id": life.request_id, "object": unit.chunk_object, "created": int(time.time()), "model": requested}
        if looked.entry is not None:
            return await _from_cache(life, unit, plan, head, looked, services.redact)
        looked.refuse()  # only-if-cached, and nothing there
        chains = life.fallbacks(settings.fallbacks, requested)
        started = await life.call(plan.vendor_calls, lambda: fallbacks.start(
            plan, planning, chains, on_attempt=life.meter.trying))
        plan = started.plan
        head["model"] = plan.model
        models = {"x-gateway-model": plan.model}
        if plan.model != requested:
            models["x-gateway-fallback-from"] = requested
        headers = life.headers(models | looked.header())
        if started.result is None:
            assert started.first is not None and started.rest is not None
            rest = started.rest if looked.key is None else Relay(started.first, started.rest, plan.model, looked)
            events = _STREAMS.get(unit.endpoint, EventStream)
            return life.stream(events(plan, unit, head, started.first, rest, life, services.redact), headers)
        result = started.result
        usage = result.usage or await life.estimated_usage(plan.prompts, plan.echoed, result.choices)
        if usage.estimated:
            headers["x-gateway-usage-estimated"] = "true"
        head["object"] = unit.answer_object
        body = unit.body(head, plan, result, usage)
        if looked.key is not None and (held := cache.kept(result.choices)) and cache.storable(held, result.usage):
            await looked.keep(plan.model, cache.Entry(held, usage, result.system_fingerprint))
        return life.answer(body, headers, result.billed, result.choices)
    except BaseException as exc:
        await life.fail(exc)


async def _from_cache(life: Lifecycle, unit: EndpointUnit[Any, Any, P], plan: P, head: dict[str, Any],
                      looked: cache.Lookup, redact: Callable[[str], str]) -> Response:
    """A hit: the entry's answer written as this request asks it (whole or streamed, its own id and
    created), under the limits (a request, no tokens) and recorded as a cache hit."""
    entry = looked.entry
    assert entry is not None
    await life.from_cache(plan.attempt())
    headers = life.headers({"x-gateway-model": plan.model} | looked.header())
    if plan.stream:
        events = _STREAMS.get(unit.endpoint, EventStream)
        return life.stream(events(plan, unit, head, cache.chunks(entry), cache.NO_MORE(), life, redact),
                           headers)
    head["object"] = unit.answer_object
    result = Result(entry.choices, entry.usage, entry.system_fingerprint, billed=entry.usage)
    return life.answer(unit.body(head, plan, result, entry.usage), headers, entry.usage, entry.choices)
