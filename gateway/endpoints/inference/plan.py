"""A vendor-native request's plan: its one vendor call (core/inference.py `InferenceCall`: `args`
checked and prepared for the vendor's native endpoint, guard.py), run on the protocol's translator
(vendors/<protocol>/inference.py), and the vendor's answer read on its way back (answers.py: JSON,
depth, the vendor's own end and error events; usage.py: its own counts).

No fan-out and no parameter verdicts: `args` is the vendor's, and it makes what `args` asks in one
call. A fallback is planned only on a vendor of the same protocol (the body is that protocol's).
The client's `inference_configuration` is held within the vendor's (configuration.py): its retries
go to the transport with the call, its timeout bounds the whole call here (a stream to its end).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.core import observe
from gateway.core.clearance import Clearance
from gateway.core.completion import Attempt, Chunk, Result, Usage, rough_tokens
from gateway.core.endpoint import Endpoint
from gateway.core.errors import BadRequest, ParameterOutOfRange, VendorFailed, VendorTimeout
from gateway.core.inference import InferenceCall, NativeChoice
from gateway.endpoints.inference import answers, guard, texts
from gateway.endpoints.inference.bounds import output_bound
from gateway.endpoints.inference.configuration import call_settings
from gateway.endpoints.inference.usage import Counted, read_usage
from gateway.endpoints.inference.wires import NativeWire, wire_of
from gateway.endpoints.unit import OneCall
from gateway.vendors import untrusted as read
from gateway.vendors.base import Adapter, Translator
from gateway.vendors.registry import Registry
from gateway.vendors.vendor_errors import redact


@dataclass(slots=True)
class InferencePlan(OneCall):
    """The plan of one vendor-native request (endpoints/unit.py `Planned`)."""

    adapter: Adapter
    translator: Translator[Any]
    wire: NativeWire
    call: InferenceCall
    model: str  # as the client (or the fallback chain) wrote it: "vendor/name"
    args: dict[str, Any]  # the client's, as it wrote them (what the demand reads)
    usage_asked_by_gateway: bool = False
    include_usage: bool = False  # the usage is the vendor's, inside its own answer
    _attempt: Attempt | None = field(default=None, init=False, repr=False)

    @property
    def choices(self) -> int:
        return 0  # the vendor's answer is its own: the gateway closes no choice of it

    def attempt(self) -> Attempt:
        if self._attempt is None:
            count_tokens = getattr(self.adapter, "count_tokens", None)
            model = self.call.model
            own = (lambda text: count_tokens(model, text)) if count_tokens is not None else None
            self._attempt = Attempt(vendor=self.adapter.name, model=self.model, streamed=self.stream, end_user=None,
                                    prompts_sent=tuple(self.call.prompts), max_completion_tokens=self.call.most,
                                    vendor_calls=1, count_tokens=own, served_by=self.call.served_by,
                                    endpoint=Endpoint.INFERENCE)
        return self._attempt

    async def complete(self) -> Result:
        span = observe.current().vendor_call(self.adapter.name, self.call)  # type: ignore[arg-type]
        try:
            with span.current():
                async with self._deadline():
                    answer = await self.translator.complete(self.call)
            raw = answer.choices[0].raw if answer.choices else None
            try:
                if answers.too_deep(raw, answers.MAX_DEPTH):
                    raise read.Malformed(f"the answer nests deeper than {answers.MAX_DEPTH} levels")
                counted = read_usage(self.wire, raw)
                text = texts.answer_text(self.wire, raw)
            except read.READ_ERRORS as exc:
                raise self._malformed(exc) from None
            usage = await self._billed(counted, lambda: text)
            result = Result([NativeChoice(0, text, response=answers.answer(raw))], usage, billed=usage)
            span.result(result)
            return result
        except BaseException as exc:
            span.failed(exc)
            raise
        finally:
            span.end()

    async def chunks(self) -> AsyncIterator[list[Chunk]]:
        """The vendor's events, each read (answers.py `NativeStream`) as one chunk whose choice holds
        the client's `generic_inference.chunk`; then the usage: the vendor's, or the gateway's count
        where it reported none (None when it reported nothing: the meter counts what was sent)."""
        native = answers.NativeStream(self.wire, usage_asked_by_gateway=self.usage_asked_by_gateway)
        generated: list[str] = []
        span = observe.current().vendor_call(self.adapter.name, self.call)  # type: ignore[arg-type]
        ends = None if self.call.timeout is None else time.monotonic() + self.call.timeout
        async with aclosing(observe.observed_stream(span, self.translator.stream(self.call))) as batches:
            while True:
                if ends is None:
                    batch = await anext(batches, None)
                else:
                    try:
                        async with asyncio.timeout(max(ends - time.monotonic(), 0)):
                            batch = await anext(batches, None)
                    except TimeoutError:
                        raise self._timed_out() from None
                if batch is None:
                    break
                out = []
                for chunk in batch:
                    for choice in chunk.choices:
                        data = choice.raw if isinstance(choice.raw, str) else orjson.dumps(choice.raw).decode()
                        try:
                            sent = native.take(data)
                            text = texts.event_text(self.wire, sent["response"]) if sent is not None else ""
                        except read.Reported as exc:
                            config = getattr(self.adapter, "_config", None)
                            message = redact(config, exc.message) if config is not None else exc.message
                            raise VendorFailed(f"vendor '{self.adapter.name}' failed mid-stream: {message}",
                                               vendor=self.adapter.name) from None
                        except read.READ_ERRORS as exc:
                            raise self._malformed(exc) from None
                        if sent is not None:
                            generated.append(text)
                            out.append(NativeChoice(0, text, response=sent))
                if out:
                    yield [Chunk(out)]
        try:
            counted = native.finish()
        except read.READ_ERRORS as exc:
            raise self._malformed(exc) from None
        usage = await self._billed(counted, lambda: "".join(generated))
        yield [Chunk([], usage, usage)]

    async def _billed(self, counted: Counted, completion: Callable[[], str]) -> Usage | None:
        """The usage of the answer: the vendor's counts; None when it reported none (the ledger's
        meter counts it, as for every endpoint); the missing one counted here when it reported one."""
        if counted.reported:
            return counted.billed(lambda: 0, lambda: 0)
        if counted.prompt_tokens is None and counted.completion_tokens is None:
            return None
        count = self.attempt().count_tokens or (lambda text: rough_tokens(len(text)))
        prompt = await asyncio.to_thread(count, "\n".join(self.call.prompts)) if counted.prompt_tokens is None else 0
        made = await asyncio.to_thread(count, completion()) if counted.completion_tokens is None else 0
        return counted.billed(lambda: prompt, lambda: made)

    @asynccontextmanager
    async def _deadline(self) -> AsyncIterator[None]:
        """The client's timeout on the whole call (none asked: the transport keeps the vendor's)."""
        if self.call.timeout is None:
            yield
            return
        try:
            async with asyncio.timeout(self.call.timeout):
                yield
        except TimeoutError:
            raise self._timed_out() from None

    def _timed_out(self) -> VendorTimeout:
        return VendorTimeout(f"vendor '{self.adapter.name}' did not answer within {self.call.timeout:g} s "
                             "(inference_configuration.timeout_seconds)", code="vendor_timeout",
                             vendor=self.adapter.name)

    def _malformed(self, exc: BaseException) -> VendorFailed:
        return VendorFailed(f"vendor '{self.adapter.name}' sent a malformed answer: {read.why(exc)}",
                            vendor=self.adapter.name)


def plan_inference(args: dict[str, Any], model: str, requested: str, configuration: dict[str, Any],
                   registry: Registry, clearance: Clearance) -> InferencePlan:
    """The plan of `args` on `model` ("vendor/name"; `requested` is the client's, whose protocol a
    fallback must speak)."""
    vendor, _, name = model.partition("/")
    adapter = registry.serving(vendor, name, Endpoint.INFERENCE)
    if model != requested:
        first = registry.get(requested.partition("/")[0])
        if first.protocol != adapter.protocol:
            raise BadRequest(f"fallback '{vendor}' speaks {adapter.protocol}, not {first.protocol}: a native body "
                             "goes only to a vendor of its own protocol", vendor=vendor)  # (skipped: fallbacks.py)
    options = getattr(adapter, "options", None)
    wire = wire_of(adapter.protocol, options if adapter.protocol == "http" else None)
    guard.check_args(wire, args, vendor=vendor, model=name)
    inference_path = getattr(getattr(adapter, "_options", None), "inference_path", None) or ""
    guard.check_shared_state(adapter.protocol, args, vendor=vendor,
                             responses_api=inference_path.rstrip("/").endswith("/responses"))
    stream = guard.wants_stream(wire, args, vendor=vendor)
    bound = output_bound(wire, args, vendor=vendor)
    prepared = guard.prepare(wire, args, model=name, stream=stream)
    retries, timeout = _call_settings(adapter, configuration)
    call = InferenceCall(model=name, body=prepared.body, stream=stream, prompts=[texts.prompt_text(args)],
                         retries=retries, timeout=timeout, most=bound.tokens if bound else None,
                         clearance=clearance)
    return InferencePlan(adapter, adapter.translators[Endpoint.INFERENCE], wire, call, model, args,
                         prepared.usage_asked_by_gateway)


def _call_settings(adapter: Adapter, configuration: dict[str, Any]) -> tuple[int | None, float | None]:
    """The client's retries and timeout (None: the vendor's), within the vendor's configured ones. The
    embedded model is never retried, and has no configured timeout to stay within."""
    num_retries, timeout_seconds = configuration.get("num_retries"), configuration.get("timeout_seconds")
    config = getattr(adapter, "_config", None)
    if config is None:
        if num_retries:
            raise ParameterOutOfRange("inference_configuration.num_retries", adapter.name, num_retries,
                                      "0 (the embedded model is not retried)")
        return None, None if timeout_seconds is None else float(timeout_seconds)
    settings = call_settings(config, num_retries, timeout_seconds)
    return (None if num_retries is None else settings.retries,
            None if timeout_seconds is None else settings.timeouts.total)
