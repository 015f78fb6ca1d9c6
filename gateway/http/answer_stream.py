"""The SSE body of a streamed answer, for every endpoint: one id/created/model on every chunk,
exactly one finish_reason per choice, the usage chunk when the client asked for it (estimated
when the vendor reported none), and an error event instead of a silent cut. What differs between
endpoints is the shape of a chunk's choice (endpoints/unit.py `Shape`: a completion's `text`, a
chat `delta`).

The events of the chunks that arrived together (one vendor read) go out as one piece of the body.
`aclose()` (called once by the response, however it ends) closes the vendor stream; the request's
lifecycle hears of every piece of text sent and of how the stream ended (one still open when the
response ends it means the client left).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import orjson
import pydantic
from pydantic import BaseModel

from gateway.core.completion import Chunk, Usage
from gateway.core.errors import GatewayError, ValidationFailed
from gateway.endpoints.unit import EndpointUnit, Planned
from gateway.endpoints.usage import usage_body
from gateway.http import event_stream
from gateway.http.lifecycle import Lifecycle

log = logging.getLogger("gateway")

M = TypeVar("M", bound=BaseModel)


class EventStream:
    def __init__(self, plan: Planned, unit: EndpointUnit[Any, Any, Any], head: dict[str, Any], first: list[Chunk],
                 rest: AsyncIterator[list[Chunk]], life: Lifecycle, redact: Callable[[str], str]) -> None:
        self._plan = plan
        self._choices = plan.choices
        self._shape = shape = unit.shape()
        self._echoed = plan.echoed
        self._redact = redact
        self._first = first
        self._rest = rest
        self._head = head
        # What every chunk's event starts with, encoded once: `data: {"id":...,"model":...,"choices":`.
        self._prefix = b"data: " + orjson.dumps(head)[:-1] + b',"choices":'
        # A shape whose pieces are whole events of their own (endpoints/inference/unit.py: a vendor's
        # event as it sent it) writes them itself; the others' are a chunk's choices.
        self._whole_events = getattr(shape, "event", None)
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
        prefix, sent, piece = self._prefix, self._life.meter.sent, self._shape.piece  # (per chunk: one call, not two)
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
                if (written := piece(c, finish)) is not None:
                    choices.append(written)
            if choices:
                sent(chunk.choices)
                events.append(prefix + orjson.dumps(choices) + b"}\n\n" if self._whole_events is None
                              else self._whole_events(choices))
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
            unfinished = [i for i in range(self._choices) if i not in finished]
            usage = self.usage
            try:
                if plan.include_usage and usage is None:
                    usage = await self._life.estimated_usage(plan.prompts, self._echoed)
            finally:
                self._life.finish(self.billed)
            if unfinished:
                end.append(event_stream.event(head | {"choices": [self._shape.closing(i) for i in unfinished]}))
            if plan.include_usage and usage is not None:
                end.append(event_stream.event(head | {"choices": [], "usage": usage_body(usage)}))
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


def parsed(model: type[M], body: dict[str, Any]) -> M:
    """The body as the generated model. The schema validator has accepted it already; pydantic's
    regex and number semantics can still differ at the edges, and that must be a 422 too."""
    try:
        return model.model_validate(body)
    except pydantic.ValidationError as exc:
        detail = [{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        raise ValidationFailed(detail) from None
