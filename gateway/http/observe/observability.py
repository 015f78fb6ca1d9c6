"""What an operator sees of a running gateway: metrics, traces and the access log of completions.

`install(settings, redact)` sets this up once per serving process (the app's construction calls
it, in every worker): logging, the process's metrics (http/observe/metrics.py), tracing when the OTEL_*
variables ask for it (http/observe/tracing.py), and the `Observer` through which the planner, the vendor
adapters and the ledger report what they do (core/observe.py).

`ObservedApp` is the outermost layer of the app. Around each POST /v5/completions it keeps the
in-flight gauge, and when the answer has ended (a stream's last byte, or the client gone) it
counts the request, its duration and time to first token, and writes the access line, from what
the handler's ledger meter knows (`attach`). With tracing on, every request gets its SERVER span.
Everything else passes straight through: one path comparison per request.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.core import observe
from gateway.core.completion import CompletionCall
from gateway.core.config import Settings
from gateway.core.endpoint import Endpoint
from gateway.core.redaction import Redactor
from gateway.http.observe import logs, metrics, tracing
from gateway.http.context import HandlerRequest
from gateway.store.meter import Meter

# The paths whose requests call vendors, with their gen_ai.operation.name (the GenAI conventions' names).
OPERATIONS = {endpoint.path: endpoint.operation for endpoint in Endpoint}
# The scope key of a completion's `_Slot`, where the handler leaves its meter (`attach`). The layers
# between pass copies of the scope down, so the slot is an object they all share.
_METER = "gateway.meter"
# The fields of the access line that hold the gateway's own values (ids it made, numbers, fixed words):
# never scrubbed. The others (account, vendor, model, fallback_from) are.
access = logs.Lines("gateway.access", verbatim=("request_id", "key_id", "status", "stream", "latency_ms", "ttft_ms",
                                                "prompt_tokens", "completion_tokens", "outcome"))


@dataclass(frozen=True, slots=True)
class Observability:
    metrics: metrics.Metrics | None
    tracing: tracing.Tracing | None


_installed: Observability | None = None


def install(settings: Settings, redact: Redactor, tracer_provider: Any = None) -> Observability:
    """This process's observability, set up on the first call (later calls return it).
    `tracer_provider` stands in for the OTEL_* variables (tests: an in-memory exporter)."""
    global _installed
    logs.configure(settings.log_level, settings.log_format, redact)
    if _installed is None:
        counted = metrics.start(settings) if settings.metrics else None
        traced = tracing.configure(settings.trace_content, provider=tracer_provider)
        _installed = Observability(counted, traced)
        observe.install(GatewayObserver(counted, traced))
    return _installed


class _Slot:
    __slots__ = ("meter", "body", "status")

    def __init__(self) -> None:
        self.meter: Meter | None = None
        self.body: Mapping[str, Any] = {}  # the validated request body
        self.status = 500  # what the answer's head said; 500 while none was sent


def uninstall() -> None:
    """Forget this process's observability (tests that install their own, then leave)."""
    global _installed
    _installed = None
    observe.install(observe.Observer())


def attach(request: HandlerRequest, meter: Meter) -> None:
    """The completion handler's meter (and the request's body), for the access line, the
    request's metrics and its span."""
    slot = request.scope.get(_METER)
    if slot is not None:
        slot.meter = meter
        slot.body = request.body


class GatewayObserver(observe.Observer):
    """The lower layers' reports, counted and traced."""

    def __init__(self, counted: metrics.Metrics | None, traced: tracing.Tracing | None) -> None:
        self._m = counted
        self._t = traced
        if counted is not None:  # the reports of every completion, straight to the metrics: one call less
            self.ledger_row = counted.row  # type: ignore[method-assign]
            self.ledger_pending = counted.pending  # type: ignore[method-assign]

    def vendor_call(self, vendor: str, call: CompletionCall) -> observe.Span:
        return self._t.vendor_call(vendor, call) if self._t is not None else observe.NO_SPAN

    def vendor_request(self, vendor: str, method: str, url: Any, resend: int) -> observe.Span:
        return self._t.vendor_request(vendor, method, url, resend) if self._t is not None else observe.NO_SPAN

    def vendor_retry(self, vendor: str, reason: str) -> None:
        if self._m is not None:
            self._m.retry(vendor, reason)

    def fallback(self, model: str, to: str) -> None:
        if self._m is not None:
            self._m.fallback(model, to)

    def ledger_row(self, row: Mapping[str, Any]) -> None:
        if self._m is not None:
            self._m.row(row)

    def ledger_pending(self, rows: int) -> None:
        if self._m is not None:
            self._m.pending(rows)

    def ledger_dropped(self, rows: int) -> None:
        if self._m is not None:
            self._m.dropped(rows)

    def rate_limited(self, reason: str) -> None:
        if self._m is not None:
            self._m.limited(reason)

    def deployment_health(self, vendor: str, deployment: str, healthy: bool) -> None:
        if self._m is not None:
            self._m.deployment(vendor, deployment, healthy)


class ObservedApp:
    """The outermost ASGI layer (see the module's docstring)."""

    def __init__(self, app: ASGIApp, observability: Observability, routes: frozenset[str]) -> None:
        self.app = app
        self._metrics = observability.metrics
        self._tracing = observability.tracing
        self._routes = routes  # the contract's paths: the only ones a span is named after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] in OPERATIONS and scope["method"] == "POST":
            await self._completion(scope, receive, send)
        elif self._tracing is not None:
            path = scope["path"]
            route = path if path in self._routes else "(other)"
            slot = _Slot()
            with self._tracing.request(scope, f"{scope['method']} {route}") as span:
                try:
                    await _served(self.app, scope, receive, send, slot)
                finally:
                    span.set({"http.response.status_code": slot.status})
        else:
            await self.app(scope, receive, send)

    async def _completion(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        slot = scope[_METER] = _Slot()
        if self._metrics is not None:
            self._metrics.started()
        try:
            if self._tracing is not None:
                with self._tracing.request(scope, f"{scope['method']} {scope['path']}") as span:
                    try:
                        await _served(self.app, scope, receive, send, slot)
                    finally:
                        span.set(_span_attributes(scope, slot.status))
            else:
                await _served(self.app, scope, receive, send, slot)
        finally:
            self._done(scope, slot.status, time.perf_counter() - started)

    def _done(self, scope: Scope, status: int, seconds: float) -> None:
        row = _row(scope)
        vendor, model = row.get("vendor"), row.get("model")
        stream = bool(row.get("streamed", _body(scope).get("stream") is True))
        ttft_ms = row.get("ttft_ms")
        if self._metrics is not None:
            self._metrics.ended(vendor, model, status, stream, seconds, None if ttft_ms is None else ttft_ms / 1000,
                                OPERATIONS[scope["path"]])
        if access.enabled():
            fields = {
                "request_id": row.get("request_id"), "account": row.get("account_id"), "key_id": row.get("key_id"),
                "vendor": vendor, "model": model, "status": status, "stream": stream,
                "latency_ms": round(seconds * 1000, 3), "ttft_ms": ttft_ms,
                "prompt_tokens": row.get("prompt_tokens"), "completion_tokens": row.get("completion_tokens"),
                "outcome": row.get("outcome"),
            }
            if row.get("fallback_from"):
                fields["fallback_from"] = row["fallback_from"]
            access.info(f"{scope['method']} {scope['path']} {status}", fields)


async def _served(app: ASGIApp, scope: Scope, receive: Receive, send: Send, slot: _Slot) -> None:
    """Run `app` on the request, noting in `slot` the status it answered, however it ends."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            slot.status = message["status"]
        await send(message)

    await app(scope, receive, sending)


def _row(scope: Scope) -> Mapping[str, Any]:
    meter = scope[_METER].meter
    return meter.row if meter is not None else {}


def _body(scope: Scope) -> Mapping[str, Any]:
    return scope[_METER].body


def _span_attributes(scope: Scope, status: int) -> dict[str, Any]:
    """The SERVER span of a completion: the request as the client asked, the answer as served."""
    row = _row(scope)
    body = _body(scope)
    return {
        "http.response.status_code": status,
        "http.route": scope["path"],
        "gen_ai.operation.name": OPERATIONS[scope["path"]],
        "gen_ai.system": row.get("vendor"),
        "gen_ai.provider.name": row.get("vendor"),
        "gen_ai.request.model": body.get("model"),
        "gen_ai.response.model": row.get("model"),
        "gen_ai.request.max_tokens": body.get("max_tokens"),
        "gen_ai.request.temperature": body.get("temperature"),
        "gen_ai.usage.input_tokens": row.get("prompt_tokens"),
        "gen_ai.usage.output_tokens": row.get("completion_tokens"),
        "gateway.request_id": row.get("request_id"),
        "gateway.account": row.get("account_id"),
        "gateway.key_id": row.get("key_id"),
        "gateway.outcome": row.get("outcome"),
    }

