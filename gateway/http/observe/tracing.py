"""OpenTelemetry traces, when the `otel` extra is installed and the standard OTEL_* variables ask
for them; without either the gateway never imports OpenTelemetry.

Tracing is on when OTEL_TRACES_EXPORTER names an exporter other than `none`, or an OTLP endpoint
is set (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); OTEL_SDK_DISABLED=true
turns it off. Everything else is the SDK's own reading of the standard variables: the OTLP
exporter's endpoint, headers, timeout and compression, the sampler (OTEL_TRACES_SAMPLER), the
batch processor (OTEL_BSP_*), the resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) and the
propagators of an incoming trace (OTEL_PROPAGATORS; W3C `traceparent` by default). Spans go out
over OTLP/HTTP (protobuf); asking for another protocol, or for tracing without the extra, stops
the start with a message saying so.

What is traced: a SERVER span per HTTP request (continuing the caller's trace), a CLIENT span
per vendor call of the planner, named and described by the GenAI semantic conventions
(`text_completion {model}`, gen_ai.*), and under it a CLIENT span per HTTP request to the vendor
(`http.request.resend_count` on a retry). Prompts and completions are recorded only with
GATEWAY_TRACE_CONTENT=1 (gen_ai.input.messages / gen_ai.output.messages).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from gateway.core import observe
from gateway.core.chat import ChatCall, content_text
from gateway.core.clearance import Withheld
from gateway.core.completion import Chunk, CompletionCall, Result, Usage
from gateway.core.endpoint import CONVERSATIONS, Endpoint
from gateway.core.errors import ClientDisconnected, ConfigError, GatewayError

SERVICE_NAME = "completions-gateway"
_CANCELLED = (asyncio.CancelledError, GeneratorExit, ClientDisconnected)


def wanted(env: Mapping[str, str]) -> bool:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure(content: bool, env: Mapping[str, str] | None = None, provider: Any = None) -> Tracing | None:
    """The process's tracing as the OTEL_* variables of `env` (default os.environ) ask, or None
    when they do not. `provider` (a TracerProvider of the caller's: tests) skips the variables."""
    env = os.environ if env is None else env
    if provider is None:
        if not wanted(env):
            return None
        provider = _provider(env)
    return Tracing(provider.get_tracer("gateway"), content)


def _provider(env: Mapping[str, str]) -> Any:
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        raise ConfigError("the OTEL_* variables ask for traces, but OpenTelemetry is not installed: "
                          "pip install 'completions-gateway[otel]' (or unset them)") from None
    exporter_name = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    elif exporter_name == "otlp":
        protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                    or "http/protobuf").strip()
        if protocol != "http/protobuf":
            raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r}: the gateway exports traces over "
                              "OTLP/HTTP, 'http/protobuf'")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    else:
        raise ConfigError(f"OTEL_TRACES_EXPORTER {exporter_name!r}: the gateway knows 'otlp', 'console' and 'none'")
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


class Tracing:
    """Spans of one process, from one tracer."""

    def __init__(self, tracer: Any, content: bool) -> None:
        from opentelemetry import context, propagate, trace

        self._tracer = tracer
        self._trace = trace
        self._context = context
        self._propagate = propagate
        self.content = content

    @contextlib.contextmanager
    def request(self, scope: Mapping[str, Any], name: str) -> Iterator[_OtelSpan]:
        """The SERVER span of one HTTP request, current while inside; continues an incoming trace."""
        carrier = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
        parent = self._propagate.extract(carrier)
        span = self._tracer.start_span(name, context=parent, kind=self._trace.SpanKind.SERVER, attributes={
            "http.request.method": scope["method"], "url.path": scope["path"], "url.scheme": scope["scheme"]})
        handle = _OtelSpan(self, span)
        token = self._context.attach(self._trace.set_span_in_context(span))
        try:
            yield handle
        finally:
            self._context.detach(token)
            span.end()

    def vendor_call(self, vendor: str, call: CompletionCall | ChatCall) -> _VendorCallSpan:
        operation = call.endpoint.operation
        chat = call.endpoint in CONVERSATIONS
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.system": vendor,
            "gen_ai.provider.name": vendor,
            "gen_ai.request.model": call.model,
            "gen_ai.request.max_tokens": call.max_tokens,
        }
        for name in ("temperature", "top_p", "seed", "frequency_penalty", "presence_penalty"):
            if (value := call.given(name)) is not None:
                attributes[f"gen_ai.request.{name}"] = value
        if call.n != 1:
            attributes["gen_ai.request.choice.count"] = call.n
        if stop := call.given("stop"):
            attributes["gen_ai.request.stop_sequences"] = [stop] if isinstance(stop, str) else stop
        if self.content:
            attributes["gen_ai.input.messages"] = _chat_messages(call.messages) if chat else \
                _messages("user", call.prompts)  # type: ignore[union-attr]
        span = self._tracer.start_span(f"{operation} {call.model}", kind=self._trace.SpanKind.CLIENT,
                                       attributes=attributes)
        return _VendorCallSpan(self, span, call.model)

    def vendor_request(self, vendor: str, method: str, url: Any, resend: int) -> _OtelSpan:
        # Without the query: a vendor may take its key there (Gemini's `key=`).
        attributes: dict[str, Any] = {"http.request.method": method, "url.full": str(url).partition("?")[0],
                                      "gateway.vendor": vendor}
        if resend:
            attributes["http.request.resend_count"] = resend
        return _OtelSpan(self, self._tracer.start_span(method, kind=self._trace.SpanKind.CLIENT,
                                                        attributes=attributes))


class _OtelSpan(observe.Span):
    __slots__ = ("_tracing", "span")

    def __init__(self, tracing: Tracing, span: Any) -> None:
        self._tracing = tracing
        self.span = span

    def set(self, attributes: Mapping[str, Any]) -> None:
        self.span.set_attributes({k: v for k, v in attributes.items() if v is not None})

    def failed(self, error: BaseException) -> None:
        if isinstance(error, _CANCELLED):
            self.span.set_attribute("gateway.cancelled", True)  # the client left: nobody's fault here
            return
        if isinstance(error, Withheld):
            self.span.set_attribute("gateway.withheld", True)  # a limit refused it: no vendor was asked
            return
        kind = error.code if isinstance(error, GatewayError) and error.code else type(error).__name__
        self.span.set_attribute("error.type", kind)
        self.span.set_status(self._tracing._trace.Status(self._tracing._trace.StatusCode.ERROR))

    def end(self) -> None:
        self.span.end()

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        token = self._tracing._context.attach(self._tracing._trace.set_span_in_context(self.span))
        try:
            yield
        finally:
            self._tracing._context.detach(token)


class _VendorCallSpan(_OtelSpan):
    __slots__ = ("_model", "_finishes", "_texts")

    def __init__(self, tracing: Tracing, span: Any, model: str) -> None:
        super().__init__(tracing, span)
        self._model = model
        self._finishes: list[str] = []
        self._texts: dict[int, list[str]] = {}

    def result(self, result: Result) -> None:
        for choice in result.choices:
            self._finish(choice.index, choice.text, choice.finish_reason)
        self._usage(result.usage)

    def chunk(self, chunk: Chunk) -> None:
        for choice in chunk.choices:
            self._finish(choice.index, choice.text, choice.finish_reason)
        if chunk.usage is not None:
            self._usage(chunk.usage)

    def end(self) -> None:
        attributes: dict[str, Any] = {"gen_ai.response.model": self._model}
        if self._finishes:
            attributes["gen_ai.response.finish_reasons"] = self._finishes
        if self._tracing.content and self._texts:
            attributes["gen_ai.output.messages"] = _messages(
                "assistant", ["".join(self._texts[i]) for i in sorted(self._texts)])
        self.span.set_attributes(attributes)
        self.span.end()

    def _finish(self, index: int, text: str, reason: str | None) -> None:
        if reason:
            self._finishes.append(reason)
        if self._tracing.content and text:
            self._texts.setdefault(index, []).append(text)

    def _usage(self, usage: Usage | None) -> None:
        if usage is not None:
            self.span.set_attributes({"gen_ai.usage.input_tokens": usage.prompt_tokens,
                                      "gen_ai.usage.output_tokens": usage.completion_tokens})


def _chat_messages(messages: list[dict[str, Any]]) -> str:
    """A conversation in the semantic conventions' message shape."""
    return orjson.dumps([{"role": m.get("role"), "parts": [{"type": "text", "content": content_text(m.get("content"))}]}
                         for m in messages]).decode()


def _messages(role: str, texts: list[str]) -> str:
    """Texts in the semantic conventions' message shape, as the JSON string attributes hold."""
    return orjson.dumps([{"role": role, "parts": [{"type": "text", "content": text}]} for text in texts]).decode()
