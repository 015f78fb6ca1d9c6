"""POST /v5/completions: plan the request, call the vendor, shape the answer (JSON or SSE)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pydantic
from starlette.responses import Response

from gateway.core.completion import Choice, Chunk, Result, Usage
from gateway.core.errors import GatewayError, ValidationFailed
from gateway.core.ids import ids
from gateway.http import event_stream, limiting
from gateway.http.context import HandlerRequest
from gateway.http.lifecycle import Lifecycle
from gateway.planner import fallbacks
from gateway.planner import plan as planning
from gateway.planner.plan import Plan
from generated.models import CompletionRequest

log = logging.getLogger("gateway")


async def create(request: HandlerRequest) -> Response:
    services = request.services
    account = request.caller.account(request.headers.get("x-selected-account-id"))
    completion_request = _parse(request.body)
    request_id = f"cmpl-{ids.next()}"  # 128 random bits (core/ids.py), without a UUID object
    created = int(time.time())
    # Admission, the meter (the request's one ledger row) and the limits' check, held until the
    # request is over and given back by it alone (http/lifecycle.py).
    settings = services.settings
    # Planned first: the limits reserve what its vendor calls can cost (their fan-out). A request
    # the planner refuses is still asked of the limits (a refusal answers before its mistake).
    planned: Plan | GatewayError | ValidationFailed
    try:
        planned = planning.plan(completion_request, services.registry, settings.max_vendor_calls)
    except (GatewayError, ValidationFailed) as exc:
        planned = exc
    demand = limiting.demand(completion_request, planned if isinstance(planned, Plan) else None,
                             falls_back=completion_request.model in settings.fallbacks)
    life = Lifecycle(request, request_id, account, demand)
    try:
        if not isinstance(planned, Plan):
            raise planned
        plan = planned
        fallback_chains = life.fallbacks(settings.fallbacks, completion_request.model)
        started = await life.call(len(plan.legs), lambda: fallbacks.start(
            plan, completion_request, services.registry, fallback_chains, settings.max_vendor_calls,
            on_attempt=life.meter.trying))
        plan = started.plan
        models = {"x-gateway-model": plan.model}
        if plan.model != completion_request.model:
            models["x-gateway-fallback-from"] = completion_request.model
        headers = life.headers(models)
        echoed = _echoed(plan, completion_request)
        if started.result is None:
            assert started.first is not None and started.rest is not None
            return life.stream(_EventStream(plan, started.first, started.rest, request_id, created, life,
                                            redact=services.redact, echoed=echoed), headers)
        result = started.result
        usage = result.usage or await life.estimated_usage(plan.prompts, echoed, result.choices)
        if usage.estimated:
            headers["x-gateway-usage-estimated"] = "true"
        body = orjson.dumps(_completion(plan, result, usage, request_id, created))
        return life.answer(body, headers, result.billed, result.choices)
    except BaseException as exc:
        await life.fail(exc)


def _parse(body: dict[str, Any]) -> CompletionRequest:
    """The body as the generated model. The schema validator has accepted it already; pydantic's
    regex and number semantics can still differ at the edges, and that must be a 422 too."""
    try:
        return CompletionRequest.model_validate(body)
    except pydantic.ValidationError as exc:
        detail = [{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        raise ValidationFailed(detail) from None


def _echoed(plan: Plan, request: CompletionRequest) -> Callable[[int], str]:
    """The prompt choice `index` starts with (nothing without echo): not part of its completion."""
    if request.echo is not True:
        return lambda index: ""
    return lambda index: plan.prompts[index // plan.n]


def _completion(plan: Plan, result: Result, usage: Usage, request_id: str, created: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": plan.model,
        "choices": [_choice(c, c.finish_reason or "stop") for c in result.choices],
        "usage": _usage(usage),
    }
    if result.system_fingerprint:
        body["system_fingerprint"] = result.system_fingerprint
    return body


class _EventStream:
    """The SSE body of one streamed completion: one id/created/model on every chunk, exactly one
    finish_reason per choice, the usage chunk when the client asked for it (estimated when the
    vendor reported none), and an error event instead of a silent cut. The events of the chunks
    that arrived together (one vendor read) go out as one piece of the body. `aclose()` (called
    once by the response, however it ends) closes the vendor stream; the request's lifecycle hears
    of every piece of text sent and of how the stream ended (one still open when the response
    ends it means the client left)."""

    def __init__(self, plan: Plan, first: list[Chunk], rest: AsyncIterator[list[Chunk]], request_id: str,
                 created: int, life: Lifecycle, redact: Callable[[str], str], echoed: Callable[[int], str]) -> None:
        self._plan = plan
        self._echoed = echoed
        self._redact = redact
        self._first = first
        self._rest = rest
        self._head = {"id": request_id, "object": "text_completion", "created": created, "model": plan.model}
        # What every chunk's event starts with, encoded once: `data: {"id":...,"model":...,"choices":`.
        self._prefix = b"data: " + orjson.dumps(self._head)[:-1] + b',"choices":'
        self._life = life
        self._events = self._generate()
        self._closed = False
        self.usage: Usage | None = None  # the client's
        self.billed: Usage | None = None  # the ledger's

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._events

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._events.aclose()
        finally:
            await self._rest.aclose()

    def _events_of(self, batch: list[Chunk], finished: set[int]) -> bytes:
        """The events of chunks that arrived together, as one piece of the body."""
        prefix, sent = self._prefix, self._life.meter.sent  # (per chunk: one call, not two)
        events = []
        for chunk in batch:
            if chunk.usage is not None:
                self.usage = chunk.usage
            if chunk.billed is not None:
                self.billed = chunk.billed
            choices = []
            for c in chunk.choices:
                finish = c.finish_reason
                if finish is not None:
                    if c.index in finished:
                        c.finish_reason = finish = None  # a vendor repeating itself
                    else:
                        finished.add(c.index)
                if c.text or finish or c.logprobs:
                    choices.append({"index": c.index, "text": c.text, "finish_reason": finish, "logprobs": c.logprobs})
            if choices:
                sent(chunk.choices)
                events.append(prefix + orjson.dumps(choices) + b"}\n\n")
        return b"".join(events)

    async def _generate(self) -> AsyncIterator[bytes]:
        plan, head = self._plan, self._head
        finished: set[int] = set()
        batch: list[Chunk] | None = self._first
        end: list[bytes] = []
        try:
            while batch is not None:
                if events := self._events_of(batch, finished):
                    yield events
                batch = await anext(self._rest, None)
            # The vendor ended its stream cleanly; a choice it never closed ended there.
            unfinished = [i for i in range(len(plan.prompts) * plan.n) if i not in finished]
            usage = self.usage
            try:
                if plan.include_usage and usage is None:
                    usage = await self._life.estimated_usage(plan.prompts, self._echoed)
            finally:
                self._life.finish(self.billed)
            if unfinished:
                end.append(event_stream.event(head | {"choices": [_choice(Choice(i, ""), "stop") for i in unfinished]}))
            if plan.include_usage and usage is not None:
                end.append(event_stream.event(head | {"choices": [], "usage": _usage(usage)}))
        except GatewayError as exc:
            self._life.failed_midway(exc)
            log.warning("stream %s failed: %s", head["id"], exc.message)
            end.append(event_stream.event(exc.body(self._redact)))
        except Exception as exc:
            self._life.failed_midway(exc)
            log.exception("stream %s failed", head["id"])
            end.append(event_stream.event(GatewayError("internal error in the gateway", code="internal_error").body()))
        end.append(event_stream.DONE)
        yield b"".join(end)


def _choice(choice: Choice, finish_reason: str | None) -> dict[str, Any]:
    # `logprobs` is null when not asked for (or, in a stream, when this piece has none), as OpenAI sends it.
    return {"index": choice.index, "text": choice.text, "finish_reason": finish_reason, "logprobs": choice.logprobs}


def _usage(usage: Usage) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    if usage.prompt_tokens_details:
        body["prompt_tokens_details"] = usage.prompt_tokens_details
    if usage.completion_tokens_details:
        body["completion_tokens_details"] = usage.completion_tokens_details
    if usage.estimated:
        body["estimated"] = True
    return body
