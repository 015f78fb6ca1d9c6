"""The SSE body of a streamed `/v5/responses` answer: OpenAI's Responses events, in place of the
chunk stream every other endpoint writes (http/answer_stream.py), and the stored response kept at
its end (store/response_writer.py, off the request's path). The events are made from what the
stream brings: a vendor's own Responses events (endpoints/responses/native.py `NativeStream`, which
keeps them to the contract), or chat chunks (endpoints/responses/stream.py `ResponseStream`: a
bridged vendor's, or a cache entry's).

- The response is kept once, whole, and its terminal event written once the writer has committed
  it (bounded: store/response_writer.py), so that a client chaining onto it at once through another
  worker finds it; a client that leaves before
  the end leaves it `incomplete` (with what it had and the usage it knows). It is not kept
  `in_progress` at the start: that cost a write per stream for a state no one could act on (a
  retrieve of a running stream is a 404 until it ends: docs/responses.md), and a retrieve never
  finds a response that claims to be running when nothing runs it.
- Exactly one terminal event, always carrying usage: the vendor's, else the gateway's count (a
  vendor's own terminal event is held until the stream's end, and given the count when it had no
  usage). A
  vendor failing mid-stream ends it with `response.failed` (error code and message, redacted), and
  what it consumed is billed as any broken stream's is (store/meter.py).
- No `[DONE]`: the Responses API has none.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

from gateway.core.completion import Chunk, Usage
from gateway.core.errors import GatewayError
from gateway.core.inference import NativeChoice
from gateway.endpoints.responses.answer import Unexpected, usage_from_chat
from gateway.endpoints.responses.native import NativeStream
from gateway.endpoints.responses.plan import AnyResponsesPlan
from gateway.endpoints.responses.stream import ResponseStream, sse
from gateway.endpoints.usage import usage_body
from gateway.http.lifecycle import Lifecycle
from gateway.store.response_writer import Pending

log = logging.getLogger("gateway")


class ResponseEvents:
    def __init__(self, plan: AnyResponsesPlan, unit: object, head: dict[str, Any], first: list[Chunk],
                 rest: AsyncIterator[list[Chunk]], life: Lifecycle, redact: Callable[[str], str],
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        # (`unit`, the endpoint's, as every stream writer is given it: its events are made from the
        # chunks' choices themselves, so it has no shape to read.)
        self._plan, self._first, self._rest = plan, first, rest
        self._life, self._redact, self._clock = life, redact, clock
        self._id = head["id"]
        self._native = any(isinstance(c, NativeChoice) for chunk in first for c in chunk.choices)
        events = NativeStream if self._native else ResponseStream
        self._stream = events(dict(plan.request), response_id=head["id"], created_at=head["created"],
                              model=head["model"])
        self._terminal: dict[str, Any] | None = None  # a vendor's own, held until the response is stored
        self._keep = plan.request.get("store") is not False
        self._events = self._generate()
        self._closed = False
        self._saved_end = False  # the response's end is stored (else aclose stores it)
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
            await self._rest.aclose()
        finally:
            if self._stream.ended and not self._saved_end:  # cancelled before it was kept
                self._save()
            elif not self._stream.ended and self._keep:  # the client left: the stored response says so
                # `incomplete`, reason null: OpenAI's reasons have no name for a client that left.
                self._stream.end(client_left=True, usage=None if self.usage is None else usage_body(self.usage))
                self._save()

    def _save(self) -> Pending | None:
        if not self._keep:
            return None
        return self._life.services.responses.keep(self._life.account, self._stream.response, self._plan.items,
                                                  self._clock())

    def _events_of(self, batch: list[Chunk]) -> bytes:
        events: list[dict[str, Any]] = []
        for chunk in batch:
            if chunk.usage is not None:
                self.usage = chunk.usage
            if chunk.billed is not None:
                self.billed = chunk.billed
            if self._native:
                self._life.meter.sent(chunk.choices)
                for choice in chunk.choices:
                    events += self._stream.feed(choice.response)  # type: ignore[attr-defined]
                if self._stream.ended and self._terminal is None:
                    self._terminal = events.pop()  # sent once stored (`_generate`)
                continue
            if chunk.choices:
                self._life.meter.sent(chunk.choices)
                events += self._stream.feed(chunk.choices)
        return b"".join(sse(event) for event in events)

    async def _generate(self) -> AsyncIterator[bytes]:
        plan, life = self._plan, self._life
        yield b"".join(sse(event) for event in self._stream.start())
        batch: list[Chunk] | None = self._first
        try:
            while batch is not None:
                if events := self._events_of(batch):
                    yield events
                batch = await anext(self._rest, None)
            try:
                usage = self.usage or await life.estimated_usage(plan.prompts, plan.echoed)
            finally:
                life.finish(self.billed)
            end = self._stream.end(usage=usage_body(usage))
        except (GatewayError, Unexpected) as exc:
            message = exc.message if isinstance(exc, GatewayError) else f"the vendor's answer: {exc}"
            code = "rate_limit_exceeded" if isinstance(exc, GatewayError) and exc.status == 429 else "server_error"
            usage = self.usage or await life.estimated_usage(plan.prompts, plan.echoed)
            life.failed_midway(exc)
            log.warning("stream %s failed: %s", self._id, message)
            end = self._stream.end(error={"code": code, "message": self._redact(message)}, usage=usage_body(usage))
        except Exception as exc:
            usage = self.usage
            life.failed_midway(exc)
            log.exception("stream %s failed", self._id)
            end = self._stream.end(error={"code": "server_error", "message": "internal error in the gateway"})
        if self._terminal is not None:  # the vendor's own end came: it is the end, sent once stored
            end = [self._own_end(usage)]
        noted = self._save()
        self._saved_end = True
        await self._life.services.responses.stored(noted)  # committed before the client reads the end
        yield b"".join(sse(event) for event in end)

    def _own_end(self, usage: Usage | None) -> dict[str, Any]:
        """The vendor's own terminal event, with the gateway's count where it reported no usage."""
        terminal = self._terminal
        assert terminal is not None and self._stream.response is not None
        if terminal["response"]["usage"] is None and usage is not None:
            terminal["response"]["usage"] = self._stream.response["usage"] = usage_from_chat(usage_body(usage))
        return terminal
