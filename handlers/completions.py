"""POST /v5/completions: plan the request, call the vendor, shape the answer (JSON or SSE)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import Response

from gateway.core.completion import Choice, Chunk, Result, Usage
from gateway.core.endpoint import Endpoint
from gateway.core.errors import GatewayError, ValidationFailed
from gateway.core.ids import ids
from gateway.core.model_names import resolved
from gateway.http import cache
from gateway.http.answer_stream import EventStream, no_echo, parsed, usage_body
from gateway.http.context import HandlerRequest
from gateway.http.lifecycle import Lifecycle
from gateway.http.server import security
from gateway.http.serving import serve
from gateway.limits import on_request
from gateway.planner import plan as planning
from gateway.planner.plan import Plan
from generated.models import CompletionRequest


async def create(request: HandlerRequest) -> Response:
    services = request.services
    security.refuse_callers_vendor_key(request.headers)
    account = request.caller.account(request.headers.get("x-selected-account-id"))
    settings = services.settings
    # An alias is its model from here on: limits, cache, plan, answer and ledger (core/model_names.py).
    request.body["model"] = resolved(request.body["model"], settings.aliases, settings.vendors)
    completion_request = parsed(CompletionRequest, request.body)
    request_id = f"cmpl-{ids.next()}"  # 128 random bits (core/ids.py), without a UUID object
    # Admission, the meter (the request's one ledger row) and the limits' check, held until the
    # request is over and given back by it alone (http/lifecycle.py).
    max_calls = services.settings.max_vendor_calls

    def plan_for(model: str) -> Plan:
        asked = completion_request if model == completion_request.model else \
            completion_request.model_copy(update={"model": model})
        return planning.plan(asked, services.registry, max_calls)

    # Planned first: the limits reserve what its vendor calls can cost (their fan-out). A request
    # the planner refuses is still asked of the limits (a refusal answers before its mistake).
    planned: Plan | GatewayError | ValidationFailed
    try:
        planned = plan_for(completion_request.model)
    except (GatewayError, ValidationFailed) as exc:
        planned = exc
    demand = on_request.demand(completion_request, planned if isinstance(planned, Plan) else None,
                             falls_back=completion_request.model in services.settings.fallbacks)
    # The response cache (http/cache.py), asked before the limits: a hit claims a request, no tokens.
    looked = await cache.look_up(request, account, Endpoint.COMPLETIONS, completion_request.model,
                                 lambda: cache.completion_form(completion_request.model_dump(by_alias=True)))
    life = Lifecycle(request, request_id, account, looked.demand(demand))

    def planned_for(model: str) -> Plan:
        if model != completion_request.model:
            return plan_for(model)
        if isinstance(planned, Plan):
            return planned
        raise planned

    answer = _Completions(request_id, int(time.time()), completion_request, services.redact)
    return await serve(request, life, completion_request.model, planned_for, answer, looked)


class _Completions:
    """How a completion is written (http/serving.py Answer)."""

    def __init__(self, request_id: str, created: int, request: CompletionRequest,
                 redact: Callable[[str], str]) -> None:
        self._id = request_id
        self._created = created
        self._echo = request.echo is True
        self._redact = redact

    def vendor_calls(self, plan: Plan) -> int:
        return len(plan.legs)

    def echoed(self, plan: Plan) -> Callable[[int], str]:
        """The prompt choice `index` starts with (nothing without echo): not part of its completion."""
        if not self._echo:
            return no_echo
        return lambda index: plan.prompts[index // plan.n]

    def body(self, plan: Plan, result: Result, usage: Usage) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self._id,
            "object": "text_completion",
            "created": self._created,
            "model": plan.model,
            "choices": [_choice(c, c.finish_reason or "stop") for c in result.choices],
            "usage": usage_body(usage),
        }
        if result.system_fingerprint:
            body["system_fingerprint"] = result.system_fingerprint
        return body

    def stream(self, plan: Plan, first: list[Chunk], rest: AsyncIterator[list[Chunk]], life: Lifecycle) -> EventStream:
        head = {"id": self._id, "object": "text_completion", "created": self._created, "model": plan.model}
        return EventStream(plan, len(plan.prompts) * plan.n, _SHAPE, head, first, rest, life, self._redact,
                           self.echoed(plan))


class _Shape:
    """A streamed completion's choices: their text, finish reason and logprobs."""

    def piece(self, choice: Choice, finish: str | None) -> dict[str, Any] | None:
        if choice.text or finish or choice.logprobs:
            return {"index": choice.index, "text": choice.text, "finish_reason": finish, "logprobs": choice.logprobs}
        return None

    def closing(self, index: int) -> dict[str, Any]:
        return _choice(Choice(index, ""), "stop")


_SHAPE = _Shape()


def _choice(choice: Choice, finish_reason: str | None) -> dict[str, Any]:
    # `logprobs` is null when not asked for (or, in a stream, when this piece has none), as OpenAI sends it.
    return {"index": choice.index, "text": choice.text, "finish_reason": finish_reason, "logprobs": choice.logprobs}
