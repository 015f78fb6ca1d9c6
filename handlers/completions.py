"""POST /v5/completions: plan the request, call the vendor, shape the answer (JSON or SSE)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pydantic
from starlette.responses import Response

from gateway.core.completion import Choice, Chunk, Result, Usage, generated, go_ahead
from gateway.core.errors import GatewayError, ValidationFailed
from gateway.core.ids import ids
from gateway.http import event_stream, limiting, observability
from gateway.http.context import HandlerRequest
from gateway.planner import fallbacks
from gateway.planner import plan as planning
from gateway.planner.plan import Plan
from gateway.store.meter import Meter
from generated.models import CompletionRequest

log = logging.getLogger("gateway")


async def create(request: HandlerRequest) -> Response:
    services = request.services
    caller = request.caller
    account = caller.account(request.headers.get("x-selected-account-id"))
    completion_request = _parse(request.body)
    request_id = f"cmpl-{ids.next()}"  # 128 random bits (core/ids.py), without a UUID object
    created = int(time.time())
    # Usage ledger: every request that reaches a vendor records exactly one row through its meter.
    meter = services.ledger.meter(request_id=request_id, account_id=account, key_id=caller.key_id)
    observability.attach(request, meter)  # the access line and the request's metrics read it
    services.admission.enter()
    check: limiting.Check | None = None
    heard = generated.set(meter.generated)  # the vendor call's task inherits it
    settings = services.settings
    try:
        # Limits of the key and the account (http/limiting.py) are asked for first; a shared store
        # answers while the request is planned and its vendor request built. One vendor call (the
        # usual case) awaits the verdict as its request is about to leave (core go_ahead); the calls
        # of a fan-out start together, after it. A refusal raises, with its ledger row.
        check = limiting.check(services.limiter, key_id=caller.key_id, account=account,
                               request=completion_request, request_id=request_id, meter=meter)
        plan = planning.plan(completion_request, services.registry, settings.max_vendor_calls)
        deferred = check.remote and len(plan.legs) == 1
        if deferred:
            check.defer()
            token = go_ahead.set(check.go_ahead)
        else:
            await check.grant()
        try:
            started = await request.unless_client_leaves(fallbacks.start(
                plan, completion_request, services.registry,
                check.fallbacks(settings.fallbacks, completion_request.model), settings.max_vendor_calls,
                on_attempt=meter.trying))
        finally:
            if deferred:
                go_ahead.reset(token)
        grant = await check.grant()  # known by now: the vendor layer awaited it before asking the vendor
    except BaseException as exc:
        services.admission.leave()
        grant, answer = (limiting.NO_LIMITS, exc) if check is None else await check.failed(exc)
        meter.fail(answer)
        if isinstance(answer, (GatewayError, ValidationFailed)) and grant.windows:  # the planner's 422s too
            answer.extra_headers = limiting.headers(grant) | (answer.extra_headers or {})
        if answer is not exc:
            raise answer from None
        raise
    finally:
        generated.reset(heard)
    plan = started.plan
    headers = {"x-request-id": request_id, "x-gateway-model": plan.model, **limiting.headers(grant)}
    if plan.model != completion_request.model:
        headers["x-gateway-fallback-from"] = completion_request.model
    if started.result is not None:
        services.admission.leave()
        result = started.result
        meter.sent(result.choices)
        try:
            usage = result.usage or await meter.estimated_usage(plan.prompts, _echoed(plan, completion_request))
        except BaseException:
            meter.finish(result.billed)  # the ledger records what the vendor calls reported
            raise
        if usage.estimated:
            headers["x-gateway-usage-estimated"] = "true"
        body = orjson.dumps(_completion(plan, result, usage, request_id, created))
        return _Answer(body, headers, then=functools.partial(meter.finish, result.billed))
    assert started.first is not None and started.rest is not None
    events = _EventStream(plan, started.first, started.rest, request_id, created, on_close=services.admission.leave,
                          meter=meter, redact=services.redact, echoed=_echoed(plan, completion_request))
    return event_stream.EventStreamResponse(events, headers=headers | {"cache-control": "no-cache"},
                                            send_timeout=services.settings.send_timeout)


class _Answer(Response):
    """A plain completion's answer, its meter closed (`then`) once the answer was sent, or failed
    to be: the ledger row (its prices, the limits it settles) is built after the client has its
    bytes, not while the client waits for them. It runs before the task yields to the loop: the
    answer is one write (its head goes with its body, http/connection.py), which waits for nothing
    unless an earlier answer on the connection still waits to drain; so a limit's slot is free
    before the client can have read the answer and asked again. Nothing reads the row sooner
    either way: the ledger commits on a clock (store/ledger.py)."""

    def __init__(self, body: bytes, headers: dict[str, str], then: Callable[[], None]) -> None:
        super().__init__(body, media_type="application/json", headers=headers)
        self._then = then

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._then()


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
    once by the response, however it ends) closes the vendor stream and releases the request's
    admission. The meter hears of every piece of text sent and of how the stream ended; one
    still open at `aclose()` means the client left."""

    def __init__(self, plan: Plan, first: list[Chunk], rest: AsyncIterator[list[Chunk]], request_id: str,
                 created: int, on_close: Callable[[], None], meter: Meter, redact: Callable[[str], str],
                 echoed: Callable[[int], str]) -> None:
        self._plan = plan
        self._echoed = echoed
        self._redact = redact
        self._first = first
        self._rest = rest
        self._head = {"id": request_id, "object": "text_completion", "created": created, "model": plan.model}
        # What every chunk's event starts with, encoded once: `data: {"id":...,"model":...,"choices":`.
        self._prefix = b"data: " + orjson.dumps(self._head)[:-1] + b',"choices":'
        self._on_close = on_close
        self._meter = meter
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
        self._meter.left()  # a stream that ended on its own closed its meter already
        try:
            await self._events.aclose()
            await self._rest.aclose()
        finally:
            self._on_close()

    def _events_of(self, batch: list[Chunk], finished: set[int]) -> bytes:
        """The events of chunks that arrived together, as one piece of the body."""
        prefix, meter = self._prefix, self._meter
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
                meter.sent(chunk.choices)
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
                    usage = await self._meter.estimated_usage(plan.prompts, self._echoed)
            finally:
                self._meter.finish(self.billed)
            if unfinished:
                end.append(event_stream.event(head | {"choices": [_choice(Choice(i, ""), "stop") for i in unfinished]}))
            if plan.include_usage and usage is not None:
                end.append(event_stream.event(head | {"choices": [], "usage": _usage(usage)}))
        except GatewayError as exc:
            self._meter.fail(exc)
            log.warning("stream %s failed: %s", head["id"], exc.message)
            end.append(event_stream.event(exc.body(self._redact)))
        except Exception as exc:
            self._meter.fail(exc)
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
