"""OpenTelemetry traces: the gateway in this process behind a real server on loopback, its spans
caught by the SDK's in-memory exporter; then a gateway process exporting over OTLP/HTTP as the
standard OTEL_* variables ask, and the gateway without the `otel` extra at all."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway import services
from gateway.http.observe import observability
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.fakes.asgi import read_request, send_json
from tests.support.fakes.server import ServerThread, free_port
from tests.support.gateway_process import ROOT, GatewayProcess
from tests.support.processes import served_in_process, wait_until

PARENT_ID = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def exporter():
    return InMemorySpanExporter()


@pytest.fixture(scope="module")
def traced(upstream, database, exporter):
    """The gateway app in this process, traced into `exporter`, served by uvicorn on loopback."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = services.load_settings(gateway_env(upstream.url, database.url, GATEWAY_PORT=str(free_port())))
    observability.uninstall()
    installed = observability.install(settings, services.redactor(settings), tracer_provider=provider)
    try:
        with served_in_process(services.create_app(settings), settings) as url:
            yield url, installed.tracing
    finally:
        observability.uninstall()


def post(url: str, key: str, trace: str, **body) -> httpx.Response:
    """POST /v5/completions as part of the caller's trace `trace` (a W3C traceparent)."""
    return httpx.post(f"{url}/v5/completions", json=body, headers={"x-api-key": key, "traceparent": trace},
                      timeout=30, verify=SHARED_TLS)


def new_trace() -> tuple[str, str]:
    """A traceparent of a new trace, and that trace's id (the spans of one test are told apart by it)."""
    trace_id = secrets.token_hex(16)
    return f"00-{trace_id}-{PARENT_ID}-01", trace_id


def finished(exporter, trace_id: str, name: str) -> list:
    """The spans of trace `trace_id` named `name`, once there is one (a server span ends after the
    answer's last byte, which the client may have read already)."""
    def found():
        return [s for s in exporter.get_finished_spans() if s.name == name and f"{s.context.trace_id:032x}" == trace_id]
    return wait_until(found, message=name)


def children(exporter, parent) -> list:
    return [s for s in exporter.get_finished_spans() if s.parent and s.parent.span_id == parent.context.span_id]


def test_a_request_continues_the_callers_trace_down_to_the_vendor(traced, exporter, database):
    url, _ = traced
    prompt = f"a private prompt {secrets.token_hex(4)}"
    trace, trace_id = new_trace()
    response = post(url, database.key, trace, model="fake/traced", prompt=prompt, max_tokens=4, temperature=0.5)
    assert response.status_code == 200
    answer = response.json()
    [server] = finished(exporter, trace_id, "POST /v5/completions")
    assert server.kind == SpanKind.SERVER
    assert f"{server.parent.span_id:016x}" == PARENT_ID
    attributes = server.attributes
    assert attributes["gen_ai.system"] == "fake" and attributes["gen_ai.request.model"] == "fake/traced"
    assert attributes["gen_ai.response.model"] == "fake/traced"
    assert attributes["gen_ai.request.max_tokens"] == 4 and attributes["gen_ai.request.temperature"] == 0.5
    assert attributes["gen_ai.usage.input_tokens"] == answer["usage"]["prompt_tokens"]
    assert attributes["gen_ai.usage.output_tokens"] == answer["usage"]["completion_tokens"]
    assert attributes["http.response.status_code"] == 200
    assert attributes["gateway.request_id"] == response.headers["x-request-id"]

    [call] = children(exporter, server)
    assert call.name == "text_completion traced" and call.kind == SpanKind.CLIENT
    assert call.attributes["gen_ai.operation.name"] == "text_completion"
    assert call.attributes["gen_ai.provider.name"] == "fake" and call.attributes["gen_ai.request.model"] == "traced"
    assert call.attributes["gen_ai.usage.output_tokens"] == answer["usage"]["completion_tokens"]
    assert list(call.attributes["gen_ai.response.finish_reasons"]) == ["length"]
    [http] = children(exporter, call)
    assert http.name == "POST" and http.attributes["http.response.status_code"] == 200
    assert "http.request.resend_count" not in http.attributes
    assert {s.context.trace_id for s in (server, call, http)} == {int(trace_id, 16)}

    # no prompt and no completion text anywhere, unless asked for
    text = answer["choices"][0]["text"].strip()
    every_value = json.dumps([dict(s.attributes) for s in (server, call, http)], default=list)
    assert prompt not in every_value and text not in every_value


def test_each_retry_is_a_span_of_the_vendor_call(traced, exporter, database):
    url, _ = traced
    trace, trace_id = new_trace()
    assert post(url, database.key, trace, model="retrying/flaky-1", prompt=f"retry {secrets.token_hex(4)}",
                max_tokens=2).status_code == 200
    [call] = finished(exporter, trace_id, "text_completion flaky-1")
    first, second = sorted(children(exporter, call), key=lambda s: s.start_time)
    assert first.attributes["http.response.status_code"] == 503 and not first.status.is_ok
    assert "http.request.resend_count" not in first.attributes
    assert second.attributes["http.response.status_code"] == 200 and second.attributes["http.request.resend_count"] == 1


def test_a_streamed_vendor_call_lasts_until_its_last_chunk(traced, exporter, database):
    url, _ = traced
    trace, trace_id = new_trace()
    response = post(url, database.key, trace, model="fake/streamed", prompt="stream it", max_tokens=6, stream=True,
                    stream_options={"include_usage": True})
    assert response.status_code == 200 and "[DONE]" in response.text
    [server] = finished(exporter, trace_id, "POST /v5/completions")
    finished(exporter, trace_id, "text_completion streamed")
    [call] = children(exporter, server)
    [http] = children(exporter, call)
    assert call.attributes["gen_ai.usage.output_tokens"] == 6
    assert list(call.attributes["gen_ai.response.finish_reasons"]) == ["length"]
    # the HTTP request's span ends with the response's head, the call's with the stream
    assert call.end_time >= http.end_time


def test_prompts_and_completions_are_recorded_only_when_asked(traced, exporter, database):
    url, tracing = traced
    tracing.content = True  # GATEWAY_TRACE_CONTENT=1
    trace, trace_id = new_trace()
    try:
        answer = post(url, database.key, trace, model="fake/content", prompt="say something", max_tokens=3).json()
    finally:
        tracing.content = False
    [call] = finished(exporter, trace_id, "text_completion content")
    sent = json.loads(call.attributes["gen_ai.input.messages"])
    assert sent == [{"role": "user", "parts": [{"type": "text", "content": "say something"}]}]
    received = json.loads(call.attributes["gen_ai.output.messages"])
    assert received[0]["role"] == "assistant" and received[0]["parts"][0]["content"] == answer["choices"][0]["text"]


def test_every_request_has_its_span_named_after_its_route(traced, exporter):
    url, _ = traced
    trace, trace_id = new_trace()
    assert httpx.get(f"{url}/healthz", headers={"traceparent": trace}, verify=SHARED_TLS).status_code == 200
    missing = httpx.get(f"{url}/no/such/{secrets.token_hex(4)}", headers={"traceparent": trace}, verify=SHARED_TLS)
    assert missing.status_code == 404
    [health] = finished(exporter, trace_id, "GET /healthz")
    [unknown] = finished(exporter, trace_id, "GET (other)")
    assert health.attributes["http.response.status_code"] == 200
    assert unknown.attributes["http.response.status_code"] == 404


# -- the OTEL_* variables, over OTLP --------------------------------------------------------------
class Collector:
    """An OTLP/HTTP trace receiver: keeps every span exported to it."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []

    async def __call__(self, scope, receive, send) -> None:
        _, body = await read_request(scope, receive)
        if scope["path"] == "/v1/traces":
            self.requests.append(ExportTraceServiceRequest.FromString(body))
        await send_json(send, 200, {})

    def spans(self) -> list[tuple[dict, object]]:
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                found += [(resource, span) for scope in resource_spans.scope_spans for span in scope.spans]
        return found


def test_the_otel_variables_send_spans_over_otlp(upstream, database):
    collector = Collector()
    with ServerThread(collector) as receiver, GatewayProcess(gateway_env(
            upstream.url, database.url, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
            OTEL_SERVICE_NAME="gateway-under-test", OTEL_BSP_SCHEDULE_DELAY="50")) as gateway:
        trace, trace_id = new_trace()
        response = post(gateway.url, database.key, trace, model="fake/exported", prompt="over otlp", max_tokens=2)
        assert response.status_code == 200
        spans = wait_until(lambda: [(r, s) for r, s in collector.spans() if s.name == "POST /v5/completions"],
                           message="the request's span at the collector")
    resource, span = spans[0]
    assert resource["service.name"] == "gateway-under-test"
    assert span.trace_id.hex() == trace_id and span.parent_span_id.hex() == PARENT_ID
    assert any(s.name == "text_completion exported" for _, s in collector.spans())


WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from gateway import services
from gateway.core.errors import ConfigError
env = {"GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_DATABASE_URL": "sqlite:///unused.db"}
services.create_app(services.load_settings(env))
print("served without OpenTelemetry")
import os
os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:4318"
from gateway.http.observe import observability
observability.uninstall()
try:
    services.create_app(services.load_settings(env))
except ConfigError as exc:
    print(exc)
"""


def test_without_the_otel_extra_the_gateway_runs_and_asking_for_traces_says_what_is_missing():
    done = subprocess.run([sys.executable, "-c", WITHOUT_OTEL], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr
    assert "served without OpenTelemetry" in done.stdout
    assert "pip install 'completions-gateway[otel]'" in done.stdout


def test_a_vendor_native_request_is_traced_as_generate_content(traced, exporter, database):
    url, _ = traced
    trace, trace_id = new_trace()
    response = httpx.post(f"{url}/v5/inference", json={"model": "fake/traced", "args": {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}},
        headers={"x-api-key": database.key, "traceparent": trace}, timeout=30, verify=SHARED_TLS)
    assert response.status_code == 200
    usage = response.json()["response"]["usage"]
    [server] = finished(exporter, trace_id, "POST /v5/inference")
    assert server.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    [call] = children(exporter, server)
    assert call.name == "generate_content traced" and call.attributes["gen_ai.request.max_tokens"] == 2
