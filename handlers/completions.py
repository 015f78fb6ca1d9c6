"""POST /v5/completions: plan the request, call the vendor, shape the answer (JSON or SSE)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pydantic
from starlette.responses import Response

from gateway import planning, sse
from gateway.errors import GatewayError, RequestInvalid
from gateway.lean import Incoming
from gateway.ledger import Meter
from gateway.security import TOKEN_INFO_KEY
from generated.models import CompletionRequest
from vendors.base import Choice, Chunk, Result, Usage

log = logging.getLogger("gateway")


async def create(request: Incoming) -> Response:
    caller = request.token_info[TOKEN_INFO_KEY]
    account = caller.account(request.headers.get("x-selected-account-id"))
    plan = planning.plan(_parse(request.body), request.services.registry)
    request_id = f"cmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    headers = {"x-request-id": request_id}
    # Usage ledger: from here on, every way out of this request records exactly one row.
    meter = request.services.ledger.meter(plan, request_id=request_id, account_id=account, key_id=caller.key_id)
    if plan.stream:
        chunks = planning.stream(plan)
        # Wait for the vendor's first chunk before sending headers: until then a vendor failure
        # can still be an honest HTTP status instead of an error event in a 200 stream.
        with meter.on_failure():
            first = await anext(chunks)
        events = _events(plan, first, chunks, request_id, created, meter)
        return sse.EventStreamResponse(events, headers=headers | {"cache-control": "no-cache"})
    with meter.on_failure():
        result = await planning.complete(plan)
    meter.finish(result.usage, result.choices)
    return Response(orjson.dumps(_completion(plan, result, request_id, created)), media_type="application/json",
                    headers=headers)


def _parse(body: dict[str, Any]) -> CompletionRequest:
    """The body as the generated model. The schema validator has accepted it already; pydantic's
    regex and number semantics can still differ at the edges, and that must be a 422 too."""
    try:
        return CompletionRequest.model_validate(body)
    except pydantic.ValidationError as exc:
        detail = [{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        raise RequestInvalid(detail) from None


def _completion(plan: planning.Plan, result: Result, request_id: str, created: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": plan.model,
        "choices": [_choice(c, c.finish_reason or "stop") for c in result.choices],
    }
    if result.usage is not None:
        body["usage"] = _usage(result.usage)
    if result.system_fingerprint:
        body["system_fingerprint"] = result.system_fingerprint
    return body


async def _events(plan: planning.Plan, first: Chunk, rest: AsyncIterator[Chunk], request_id: str,
                  created: int, meter: Meter) -> AsyncIterator[bytes]:
    """SSE events with one id/created/model, exactly one finish_reason per choice, the usage chunk
    when the client asked for it, and an error event instead of a silent cut. The meter hears of
    every piece of text sent and of how the stream ended (ledger)."""
    head = {"id": request_id, "object": "text_completion", "created": created, "model": plan.model}
    finished: set[int] = set()
    usage: Usage | None = None
    chunk: Chunk | None = first
    try:
        while chunk is not None:
            if chunk.usage is not None:
                usage = chunk.usage
            choices = []
            for c in chunk.choices:
                if c.finish_reason is not None:
                    if c.index in finished:
                        c.finish_reason = None  # a vendor repeating itself
                    else:
                        finished.add(c.index)
                if c.text or c.finish_reason or c.logprobs:
                    choices.append(_choice(c, c.finish_reason))
            if choices:
                meter.sent(chunk.choices)
                yield sse.event(head | {"choices": choices})
            chunk = await anext(rest, None)
        # The vendor ended its stream cleanly; a choice it never closed ended there.
        meter.finish(usage)
        unfinished = [i for i in range(len(plan.prompts) * plan.n) if i not in finished]
        if unfinished:
            yield sse.event(head | {"choices": [_choice(Choice(i, ""), "stop") for i in unfinished]})
        if plan.include_usage and usage is not None:
            yield sse.event(head | {"choices": [], "usage": _usage(usage)})
    except GatewayError as exc:
        meter.fail(exc)
        log.warning("stream %s failed: %s", request_id, exc.message)
        yield sse.event(exc.body())
    except Exception as exc:
        meter.fail(exc)
        log.exception("stream %s failed", request_id)
        yield sse.event(GatewayError("internal error in the gateway", code="internal_error").body())
    except BaseException as exc:  # cancelled or closed: the client went away
        meter.fail(exc)
        raise
    yield sse.DONE


def _choice(choice: Choice, finish_reason: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"index": choice.index, "text": choice.text, "finish_reason": finish_reason}
    if choice.logprobs is not None:
        body["logprobs"] = choice.logprobs
    return body


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
    return body
