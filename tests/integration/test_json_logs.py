"""Logs: with GATEWAY_LOG_FORMAT=json every line a gateway process writes to its log is one JSON
object (uvicorn's too), a completion's access line carries what an operator needs, and no secret
reaches the log; text stays the default."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.environments import SHARED_TLS, UPSTREAM_SECRET, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import wait_until

KEY_SHAPED = "sk-proj-" + "Q" * 24  # a client putting a key where a model name goes


@pytest.fixture(scope="module")
def json_log(upstream, database):
    """The log lines of a JSON-logging gateway after these requests, and the requests' answers."""
    gateway = GatewayProcess(gateway_env(upstream.url, database.url, GATEWAY_LOG_FORMAT="json"), separate_stdout=True)
    with gateway, httpx.Client(base_url=gateway.url, headers={"x-api-key": database.key}, timeout=30,
                               verify=SHARED_TLS) as client:
        answers = {
            "plain": client.post("/v5/completions", json={"model": "fake/logged", "prompt": "hi", "max_tokens": 3}),
            "stream": client.post("/v5/completions", json={"model": "fake/logged", "prompt": "hi", "max_tokens": 3,
                                                           "stream": True}),
            "secret": client.post("/v5/completions", json={"model": f"fake/{KEY_SHAPED}", "prompt": "hi"}),
            "vendor_error": client.post("/v5/completions", json={"model": "fake/fail-500", "prompt": "hi"}),
            "no_key": httpx.post(f"{gateway.url}/v5/completions", json={"model": "fake/x", "prompt": "hi"},
                                 verify=SHARED_TLS),
        }
    text = gateway.log_path.read_text()
    return [line for line in text.splitlines() if line.strip()], answers, text


def access_line(lines: list[str], request_id: str) -> dict:
    [entry] = [e for e in map(json.loads, lines) if e.get("request_id") == request_id]
    return entry


def test_every_line_is_one_json_object_uvicorns_included(json_log):
    lines, _, _ = json_log
    entries = [json.loads(line) for line in lines]  # fails on any line that is not JSON
    assert all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    loggers = {e["logger"] for e in entries}
    assert {"uvicorn.error", "gateway", "gateway.access"} <= loggers
    assert any("Application startup complete" in e["message"] for e in entries)


def test_a_completions_access_line_says_who_what_and_how_long(json_log, database):
    lines, answers, _ = json_log
    plain, stream = answers["plain"], answers["stream"]
    entry = access_line(lines, plain.headers["x-request-id"])
    usage = plain.json()["usage"]
    assert entry["logger"] == "gateway.access" and entry["level"] == "info"
    assert entry["account"] == "acct-a" and entry["key_id"].startswith("key_")
    assert (entry["vendor"], entry["model"], entry["status"], entry["stream"]) == ("fake", "fake/logged", 200, False)
    assert entry["latency_ms"] > 0 and entry["outcome"] == "completed"
    assert (entry["prompt_tokens"], entry["completion_tokens"]) == (usage["prompt_tokens"], usage["completion_tokens"])
    streamed = access_line(lines, stream.headers["x-request-id"])
    assert streamed["stream"] is True and 0 < streamed["ttft_ms"] <= streamed["latency_ms"]
    assert streamed["completion_tokens"] == 3


def test_requests_refused_before_a_vendor_are_logged_too(json_log):
    lines, answers, _ = json_log
    assert answers["no_key"].status_code == 401
    refused = [e for e in map(json.loads, lines) if e["logger"] == "gateway.access" and e["status"] == 401]
    assert len(refused) == 1 and refused[0]["account"] is None and refused[0]["request_id"] is None


def test_no_secret_reaches_the_log(json_log, database):
    lines, answers, text = json_log
    assert answers["vendor_error"].status_code == 502  # the fake quotes the gateway's Authorization header
    assert UPSTREAM_SECRET not in text and database.key not in text and KEY_SHAPED not in text
    entry = access_line(lines, answers["secret"].headers["x-request-id"])
    assert entry["model"] == "fake/[redacted]"


def test_text_stays_the_default_with_the_access_line_as_key_values(gateway, client):
    response = client.post("/v5/completions", json={"model": "fake/texted", "prompt": "hi", "max_tokens": 2})
    request_id = response.headers["x-request-id"]
    # written once the answer's last byte went out, which the client may have read already
    [line] = wait_until(lambda: [line for line in gateway.log().splitlines() if f"request_id={request_id}" in line],
                        message="the access line")
    assert "INFO gateway.access: POST /v5/completions 200" in line
    assert "model=fake/texted" in line and "status=200" in line and "account=acct-a" in line


@pytest.mark.parametrize("text", [
    "nothing secret here", "Authorization: Bearer abcdefghijklmnop", "AUTHORIZATION=xyz", "x-api-key: k",
    "X-Goog-Api-Key=abc", "api_key='v'", "SK-ABCDEFGHIJKLMN", "\u017fk-abcdefghijkl", "key \u212aeep",
    "AIza" + "B" * 35, "bearer ABCDEFGHIJKLMNOP", "the vendor key TopSecretValue9 again", "sk-short",
])
def test_the_redactors_quick_check_never_skips_what_its_pattern_scrubs(text):
    from gateway.core.redaction import Redactor, _replacement

    redact = Redactor(["topsecretvalue9"])
    assert redact(text) == redact._pattern.sub(_replacement, text)
