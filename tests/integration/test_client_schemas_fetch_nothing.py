"""A chat request's JSON Schemas never make the gateway fetch anything (SECURITY.md): a `$schema`,
`$ref` or `$dynamicRef` naming a loopback server, a file, or a port that never answers is a 422
naming where it stands, from a real `gateway serve` process, and nothing reaches what it names;
schemas that keep to themselves work as before."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.listeners import BlackHole, RecordingServer
from tests.support.processes import wait_until
from tests.support.provision import new_key, run_cli

USER = [{"role": "user", "content": "hello there"}]
SCHEMA_AT = {
    "response_format": ["response_format", "json_schema", "schema"],
    "strict response_format": ["response_format", "json_schema", "schema"],
    "tools": ["tools", 0, "function", "parameters"],
    "functions": ["functions", 0, "parameters"],
}
KEYWORD_AT = {"$schema": [], "$ref": ["properties", "a"], "$dynamicRef": ["properties", "a"]}


@pytest.fixture
def recorder():
    with RecordingServer() as server:
        yield server


@pytest.fixture(scope="module")
def schema_gateway(upstream, database):
    """A gateway of this module's own that reads a key's limits at once (for the allow-list)."""
    with GatewayProcess(gateway_env(upstream.url, database.url, GATEWAY_LIMITS_CACHE_SECONDS="0.05")) as process:
        yield process


def chat(gateway, key: str, **body) -> httpx.Response:
    return httpx.post(f"{gateway.url}/v5/chat/completions", headers={"x-api-key": key}, verify=SHARED_TLS,
                      json={"model": "fake/m", "messages": USER, "max_tokens": 2} | body, timeout=60)


def carrying(where: str, schema: dict) -> dict:
    """A request body's fields that carry `schema` at `where` (SCHEMA_AT)."""
    if where.endswith("response_format"):
        described = {"name": "answer", "schema": schema} | ({"strict": True} if where.startswith("strict") else {})
        return {"response_format": {"type": "json_schema", "json_schema": described}}
    function = {"name": "lookup", "parameters": schema}
    return {"tools": [{"type": "function", "function": function}]} if where == "tools" else {"functions": [function]}


def naming(keyword: str, target: str) -> dict:
    """A schema whose `keyword` names `target`, at KEYWORD_AT[keyword]."""
    if keyword == "$schema":
        return {"$schema": target, "type": "object"}
    return {"type": "object", "properties": {"a": {keyword: target}}}


def locations(answer: httpx.Response) -> list[list]:
    return [entry["loc"] for entry in answer.json()["detail"]]


@pytest.mark.parametrize("where", SCHEMA_AT)
@pytest.mark.parametrize("keyword", KEYWORD_AT)
@pytest.mark.parametrize("target", ["recorder", "file:///etc/passwd"])
def test_a_schema_naming_a_document_elsewhere_is_a_422_where_it_stands_and_nothing_is_fetched(
        schema_gateway, database, recorder, where, keyword, target):
    named = f"{recorder.url}/{where.replace(' ', '-')}/{keyword}" if target == "recorder" else target
    answer = chat(schema_gateway, database.key, **carrying(where, naming(keyword, named)))
    assert (recorder.connections, recorder.paths) == (0, [])
    assert answer.status_code == 422, answer.text
    assert locations(answer) == [["body", *SCHEMA_AT[where], *KEYWORD_AT[keyword], keyword]]
    assert named in answer.json()["detail"][0]["msg"]


def test_what_a_file_holds_is_not_told_by_the_answer(schema_gateway, database, tmp_path):
    """A JSON file, a file that is not JSON and no file at all get the same answer: the gateway
    never reads what a schema names."""
    (tmp_path / "schema.json").write_text(json.dumps({"type": "object"}))
    answers = []
    for path in (tmp_path / "schema.json", "/etc/passwd", tmp_path / "missing.json"):
        named = f"file://{path}"
        answer = chat(schema_gateway, database.key, **carrying("tools", naming("$schema", named)))
        answers.append((answer.status_code, answer.text.replace(named, "<file>")))
    assert [status for status, _ in answers] == [422, 422, 422]
    assert answers[0] == answers[1] == answers[2]


def test_a_request_an_allow_list_refuses_fetches_nothing_either(schema_gateway, database, recorder):
    key, key_id, _ = new_key(database.url)
    run_cli(database.url, "limits", "set", "--key", key_id, "--models", "fake/allowed-*")
    try:
        wait_until(lambda: chat(schema_gateway, key).status_code == 403, message="the allow-list applied")
        for model in ("fake/m", "fake/allowed-m"):  # outside the allow-list, and inside it
            answer = chat(schema_gateway, key, model=model,
                          **carrying("strict response_format", naming("$schema", f"{recorder.url}/allowed")))
            assert (recorder.connections, recorder.paths) == (0, [])
            assert answer.status_code == 422, answer.text
            assert locations(answer) == [["body", "response_format", "json_schema", "schema", "$schema"]]
    finally:
        run_cli(database.url, "limits", "clear", "--key", key_id, "--all")


@pytest.mark.parametrize("keyword", ["$schema", "$ref"])
def test_a_schema_naming_a_port_that_never_answers_stalls_nothing(schema_gateway, database, keyword):
    """The request is answered and /healthz with it, and the black hole was never connected to:
    its queue holds every connection made to it, so this does not hang on when it is looked at."""
    with BlackHole() as hole, ThreadPoolExecutor(1) as pool:
        asked = pool.submit(chat, schema_gateway, database.key,
                            **carrying("response_format", naming(keyword, f"{hole.url}/schema")))
        health = httpx.get(f"{schema_gateway.url}/healthz", timeout=60)
        answer = asked.result()
        assert hole.connections() == 0
        assert health.status_code == 200
        assert answer.status_code == 422, answer.text
        assert locations(answer) == [["body", "response_format", "json_schema", "schema",
                                      *KEYWORD_AT[keyword], keyword]]


# -- what keeps to itself works as before (a strict schema's answers are held to it) ----------------

LOCAL = {"type": "object", "$defs": {"said": {"type": "string"}}, "properties": {"said": {"$ref": "#/$defs/said"}},
         "required": ["said"], "additionalProperties": False}


@pytest.mark.parametrize("stream", [False, True])
def test_a_strict_schema_with_local_references_holds_every_choice_to_it(vclient, anthropic_upstream, stream):
    """Anthropic's `n` is fanned out: one call per choice, each answer checked against the schema."""
    format_ = {"type": "json_schema", "json_schema": {"name": "said", "schema": LOCAL, "strict": True}}
    answer = vclient.post("/v5/chat/completions", json={"model": "anthropic/claude-x", "messages": USER, "n": 2,
                                                        "response_format": format_, "stream": stream})
    assert answer.status_code == 200, answer.text
    assert len(anthropic_upstream.requests) == 2
    if not stream:
        assert [json.loads(c["message"]["content"]) for c in answer.json()["choices"]] == [{"said": "hello there"}] * 2
    missed = vclient.post("/v5/chat/completions", json={"model": "anthropic/off-schema", "messages": USER,
                                                        "response_format": format_, "stream": stream})
    if stream:
        assert missed.status_code == 200 and "strict json_schema" in missed.text
    else:
        assert missed.status_code == 502 and "strict json_schema" in missed.json()["error"]["message"]


def test_a_strict_schema_that_cannot_be_checked_against_is_a_422_before_any_vendor_call(vclient, anthropic_upstream):
    dangling = {"type": "object", "properties": {"said": {"$ref": "#/$defs/missing"}}}
    format_ = {"type": "json_schema", "json_schema": {"name": "said", "schema": dangling, "strict": True}}
    answer = vclient.post("/v5/chat/completions", json={"model": "anthropic/claude-x", "messages": USER,
                                                        "response_format": format_})
    assert answer.status_code == 422, answer.text
    assert locations(answer) == [["body", "response_format", "json_schema", "schema"]]
    assert "missing" in answer.json()["detail"][0]["msg"]
    assert anthropic_upstream.requests == []


# -- images: a vendor's to fetch, never the gateway's ------------------------------------------------

@pytest.mark.parametrize("model", ["fake/m", "anthropic/claude-x", "gemini/gem-x"])
def test_an_image_url_is_passed_on_or_refused_and_never_fetched(vclient, recorder, upstream, anthropic_upstream,
                                                                 gemini_upstream, model):
    image = f"{recorder.url}/image.png"
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                             {"type": "image_url", "image_url": {"url": image}}]}]
    answer = vclient.post("/v5/chat/completions", json={"model": model, "messages": messages, "max_tokens": 2})
    assert (recorder.connections, recorder.paths) == (0, [])
    sent = [r["body"] for fake in (upstream, anthropic_upstream, gemini_upstream) for r in fake.requests]
    if model.startswith("gemini/"):  # Gemini reads images inline only: the gateway does not fetch one for it
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "messages", answer.text
        assert sent == []
    else:
        assert answer.status_code == 200, answer.text
        assert image in json.dumps(sent)  # the URL as the client gave it, for the vendor to read
