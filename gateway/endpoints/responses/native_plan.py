"""A Responses request's plan on a vendor that has the Responses API itself (OpenAI's: the
protocol's translator for the endpoint is a `NativeTranslator`, vendors/openai/responses.py): one
vendor call of the request's own body (native.py `native_request`, stateless), its answer read
back into the contract's shapes (native.py), its usage the vendor's, read from the answer or from
the stream's terminal event.

No fan-out and no parameter verdicts of chat's: the vendor takes the Responses fields as they are,
and what the contract has no place for is refused by `native_request`. A fallback to a vendor
without the API is planned bridged (plan.py): the unit re-plans per model.

Its answer is the contract's `response` as far as the vendor decides it (status, output, usage),
in a `NativeChoice` whose `response` the unit's answer completes with the request's own id, time
and model (unit.py). A stream's chunks are the vendor's events, decoded, one `NativeChoice` each
(http/response_events.py writes them through native.py `NativeStream`), then the usage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.core import client_schemas, observe
from gateway.core.clearance import Clearance
from gateway.core.completion import Attempt, Choice, Chunk, Result
from gateway.core.endpoint import Endpoint
from gateway.core.errors import VendorFailed
from gateway.core.inference import NativeChoice
from gateway.core.responses import NativeResponsesCall
from gateway.endpoints.responses.answer import MAX_ERROR_MESSAGE, Unexpected, output_text
from gateway.endpoints.responses.native import TERMINAL, billed, chat_choice, from_native, unmet
from gateway.endpoints.responses.rules import FORMAT_SCHEMA, answer_format, strict
from gateway.endpoints.unit import OneCall
from gateway.vendors import untrusted as read
from gateway.vendors.base import Adapter, Translator
from gateway.vendors.vendor_errors import redact

TEXT_DELTA = "response.output_text.delta"
ERROR = "error"  # OpenAI's event for a stream that failed without a response


@dataclass(slots=True)
class NativePlan(OneCall):
    """The plan of one Responses request on a vendor's own Responses API (endpoints/unit.py `Planned`)."""

    adapter: Adapter
    translator: Translator[Any]
    call: NativeResponsesCall
    model: str  # as the client (or the fallback chain) wrote it: "vendor/name"
    request: Mapping[str, Any]  # the Responses request as the client sent it (its `model` the one planned)
    items: list[dict[str, Any]] = field(default_factory=list)  # its own input items, as stored
    schema: Any = None  # the compiled strict schema of its `text.format`, which its answer must match
    include_usage: bool = True  # a response always carries its usage
    _attempt: Attempt | None = field(default=None, init=False, repr=False)

    @property
    def choices(self) -> int:
        return 1

    def attempt(self) -> Attempt:
        if self._attempt is None:
            self._attempt = Attempt(vendor=self.adapter.name, model=self.model, streamed=self.stream,
                                    end_user=self.request.get("user"), prompts_sent=tuple(self.call.prompts),
                                    max_completion_tokens=self.call.most, vendor_calls=1,
                                    served_by=self.call.served_by, endpoint=Endpoint.RESPONSES)
        return self._attempt

    async def complete(self) -> Result:
        span = observe.current().vendor_call(self.adapter.name, self.call)  # type: ignore[arg-type]
        try:
            with span.current():
                answer = await self.translator.complete(self.call)
            raw = answer.choices[0].raw if answer.choices else None
            try:
                found = read.obj(raw, "the response")
                made = from_native(found, dict(self.request), response_id="", created_at=0, model=self.model)
                usage = billed(found.get("usage"))
            except (Unexpected, *read.READ_ERRORS) as exc:
                raise self._malformed(exc) from None
            self._held(made)
            result = Result([NativeChoice(0, output_text(made), response=made, as_chat=chat_choice(made))], usage,
                            billed=usage)
            span.result(result)
            return result
        except BaseException as exc:
            span.failed(exc)
            raise
        finally:
            span.end()

    async def chunks(self) -> AsyncIterator[list[Chunk]]:
        """The vendor's events, each decoded into a chunk of one `NativeChoice` (its text the text
        delta it carries: what the meter hears), then the terminal event's usage (none when it
        carried none: the meter counts what was sent). A stream without its terminal event was cut:
        the vendor's failure."""
        span = observe.current().vendor_call(self.adapter.name, self.call)  # type: ignore[arg-type]
        usage, ended = None, False
        async with aclosing(observe.observed_stream(span, self.translator.stream(self.call))) as batches:
            async for batch in batches:
                out: list[Choice] = []
                try:
                    for chunk in batch:
                        for choice in chunk.choices:
                            if ended or not isinstance(choice, NativeChoice) or choice.raw in ("", "[DONE]"):
                                continue  # (after its terminal event, nothing the vendor sends is read)
                            event, made, found = self._event(choice.raw)
                            usage = found or usage
                            ended = ended or made is not None
                            delta = event.get("delta") if event.get("type") == TEXT_DELTA else None
                            out.append(NativeChoice(0, delta if isinstance(delta, str) else "", response=event,
                                                    as_chat=None if made is None else chat_choice(made)))
                except VendorFailed:
                    if out:  # what the vendor sent before it failed goes first, whatever its reads held
                        yield [Chunk(out)]
                    raise
                if out:
                    yield [Chunk(out)]
        if not ended:  # cut: what was sent is billed as any broken stream's is (store/meter.py)
            raise VendorFailed(f"vendor '{self.adapter.name}' ended its stream before its response did",
                               vendor=self.adapter.name)
        if usage is not None:
            yield [Chunk([], usage, usage)]

    def _event(self, data: str) -> tuple[dict[str, Any], dict[str, Any] | None, Any]:
        """One event of the vendor's, decoded; for its terminal event, the response it ends with
        (kept to the contract, held to the request) and the usage it reports."""
        try:
            event = read.obj(orjson.loads(data), "an event")
            kind = event.get("type")
            if kind == ERROR:
                raise read.Reported(read.text(event.get("message") or "", "its message", MAX_ERROR_MESSAGE))
            made = usage = None
            if kind in TERMINAL:
                found = read.obj(event.get("response"), "its response")
                made = from_native(found, dict(self.request), response_id="", created_at=0, model=self.model)
                self._held(made)
                usage = billed(found.get("usage"))
        except read.Reported as exc:
            config = getattr(self.adapter, "_config", None)
            message = redact(config, exc.message) if config is not None else exc.message
            raise VendorFailed(f"vendor '{self.adapter.name}' failed mid-stream: {message}",
                               vendor=self.adapter.name) from None
        except (orjson.JSONDecodeError, Unexpected, *read.READ_ERRORS) as exc:
            raise self._malformed(exc) from None
        return event, made, usage

    def _held(self, made: dict[str, Any]) -> None:
        """The vendor's failure when its response is not what it was asked (native.py `unmet`)."""
        if (why := unmet(dict(self.request), made, self.schema)) is not None:
            raise VendorFailed(f"vendor '{self.adapter.name}' {why}", vendor=self.adapter.name)

    def _malformed(self, exc: BaseException) -> VendorFailed:
        return VendorFailed(f"vendor '{self.adapter.name}' sent a malformed response: {read.why(exc)}",
                            vendor=self.adapter.name)


def plan_native(adapter: Adapter, translator: Translator[Any], body: dict[str, Any], prompts: list[str],
                model: str, request: Mapping[str, Any], items: list[dict[str, Any]],
                clearance: Clearance) -> NativePlan:
    """The plan of `body` (native.py `native_request`, its model the vendor's own name) on `model`."""
    call = NativeResponsesCall(model=body["model"], body=body, stream=bool(body.get("stream")), prompts=prompts,
                               most=body.get("max_output_tokens"), clearance=clearance)
    format_ = answer_format(request)
    schema = client_schemas.compiled(format_["schema"], FORMAT_SCHEMA) if strict(format_) else None
    return NativePlan(adapter, translator, call, model, request, items, schema)
