"""The native-parameter check (test_native_parameters.py) against a real OpenAI-compatible server:
llama.cpp's own (xllamacpp, the packaged model), behind a gateway that identifies it as it starts.
Every parameter the gateway declares native for llama.cpp's server, on both endpoints, is sent
through the gateway; the server must take it, and the answer must show it where a real model's
answer can: choices and their usage, lengths, a stop sequence, logprobs, a token bias, a seed,
JSON. The server ignores what it does not know, so the answer is the only witness here."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from gateway.core.endpoint import Endpoint
from gateway.core.config import VendorConfig
from gateway.core.parameters import NATIVE
from gateway.planner.capabilities import verdicts
from gateway.vendors import registry
from tests.support.environments import LOCAL_TIMEOUT, NO_EOS, SHARED_TLS
from tests.support.gateway_process import GatewayProcess
from tests.support.parameter_examples import CHAT, CHAT_COMPANIONS, COMPLETIONS, example

pytestmark = pytest.mark.slow

ENDPOINTS = {COMPLETIONS: "/v5/completions", CHAT: "/v5/chat/completions"}
PROMPT = {COMPLETIONS: {"prompt": "The capital of France is"},
          CHAT: {"messages": [{"role": "user", "content": "Name a city."}]}}  # fmt: skip
_adapter, _options = registry.options_of(VendorConfig(name="llamacpp", protocol="openai",
                                                      options={"server": "llama.cpp"}))
RECORDS = {COMPLETIONS: verdicts(_adapter.capabilities_of[Endpoint.COMPLETIONS](_options)),
           CHAT: verdicts(_adapter.capabilities_of[Endpoint.CHAT](_options))}
CASES = [(endpoint, name) for endpoint, found in RECORDS.items() for name, support in found.items()
         if support.kind == NATIVE]
# Measured (2026-12): with the packaged model, llama.cpp's server answers text to a forced tool call:
# `tool_choice` is taken and ignored. The gateway's "native" is llama.cpp's documented behaviour (a
# server started with --jinja calls tools with any model's template); which one holds is open, and
# this case fails the day the server here calls the tool.
IGNORED_HERE = {(CHAT, "tool_choice"): "llama.cpp's server here ignores a forced tool call (measured)"}
PARAMS = [pytest.param(endpoint, name, id=f"{endpoint}-{name}", marks=[pytest.mark.xfail(
    strict=True, reason=IGNORED_HERE[endpoint, name])] if (endpoint, name) in IGNORED_HERE else [])
    for endpoint, name in CASES]


@pytest.fixture(scope="module")
def llamacpp(engine, database):
    env = {"GATEWAY_DATABASE_URL": database.url, "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
           "GATEWAY_VALIDATE_RESPONSES": "1", "GATEWAY_VENDOR_LLAMACPP_PROTOCOL": "openai",
           "GATEWAY_VENDOR_LLAMACPP_BASE_URL": f"{engine.url}/v1"}  # fmt: skip
    with GatewayProcess(env) as process, httpx.Client(base_url=process.url, headers={"x-api-key": database.key},
                                                      timeout=LOCAL_TIMEOUT, verify=SHARED_TLS) as client:
        yield client


def test_the_server_is_identified_and_served_as_the_records_say(llamacpp):
    vendor = next(v for v in llamacpp.get("/v5/vendors").json()["data"] if v["name"] == "llamacpp")
    assert vendor["server"] == "llama.cpp"
    for endpoint, field in ((COMPLETIONS, "parameters"), (CHAT, "chat_parameters")):
        natives = {name for name, found in vendor[field].items() if found["support"] == NATIVE}
        assert natives == {name for e, name in CASES if e == endpoint}


@pytest.mark.parametrize(("endpoint", "name"), PARAMS)
def test_a_native_parameter_is_honoured_by_llamacpps_server(llamacpp, engine, endpoint, name):
    check = CHECKS.get((endpoint, name))
    if check is not None:
        check(Asker(llamacpp, endpoint), engine)
        return
    value = example(endpoint, name)
    extra = CHAT_COMPANIONS.get(name, {}) if endpoint == CHAT else {}
    answer = Asker(llamacpp, endpoint).post({name: value, **extra, "max_tokens": 2})
    assert answer.status_code == 200, answer.text


class Asker:
    def __init__(self, client: httpx.Client, endpoint: str) -> None:
        self.client, self.endpoint = client, endpoint

    def post(self, fields: dict[str, Any]) -> httpx.Response:
        body = {"model": "llamacpp/smollm2-135m", **PROMPT[self.endpoint], **fields}
        return self.client.post(ENDPOINTS[self.endpoint], json=body)

    def ok(self, fields: dict[str, Any]) -> dict[str, Any]:
        answer = self.post(fields)
        assert answer.status_code == 200, answer.text
        return answer.json()


def _texts(body: dict[str, Any]) -> list[str]:
    return [c["text"] if "text" in c else c["message"]["content"] or "" for c in body["choices"]]


# -- what a real model's answer shows ------------------------------------------------------------
def _choices_and_their_usage(ask: Asker, engine) -> None:
    """n (or a list of prompts) gives that many choices, and usage counts every one of them (the server
    counts one task's: the gateway asks it one task per call)."""
    body = ask.ok({"n": 2, "max_tokens": 3, "logit_bias": NO_EOS})
    assert len(body["choices"]) == 2 and body["usage"]["completion_tokens"] == 2 * 3, body


def _list_of_prompts(ask: Asker, engine) -> None:
    body = ask.ok({"prompt": ["Hello", "The sky is"], "max_tokens": 3, "logit_bias": NO_EOS})
    assert len(body["choices"]) == 2 and body["usage"]["completion_tokens"] == 2 * 3, body


def _length(name: str):
    def check(ask: Asker, engine) -> None:
        body = ask.ok({name: 4, "logit_bias": NO_EOS})
        assert body["usage"]["completion_tokens"] == 4 and body["choices"][0]["finish_reason"] == "length", body
    return check


def _stop(ask: Asker, engine) -> None:
    """A stop sequence taken from what the model writes at temperature 0 cuts it there."""
    greedy = {"temperature": 0, "max_tokens": 8, "logit_bias": NO_EOS}
    text = _texts(ask.ok(greedy))[0]
    stop = text[len(text) // 2:][:3]
    assert stop.strip(), text
    cut = ask.ok({**greedy, "stop": [stop]})
    assert _texts(cut) == [text[: text.index(stop)]] and cut["choices"][0]["finish_reason"] == "stop", (text, cut)


def _logit_bias(ask: Asker, engine) -> None:
    comma = engine.tokenize(",")[0]
    body = ask.ok({"logit_bias": {str(comma): 100}, "max_tokens": 3})
    assert _texts(body) == [",,,"], body


def _seed(ask: Asker, engine) -> None:
    sampled = {"seed": 31337, "temperature": 1.5, "max_tokens": 6, "logit_bias": NO_EOS}
    assert _texts(ask.ok(sampled)) == _texts(ask.ok(sampled))


def _completion_logprobs(ask: Asker, engine) -> None:
    body = ask.ok({"logprobs": 2, "max_tokens": 3, "logit_bias": NO_EOS})
    logprobs = body["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == 3 and all(len(top) <= 3 for top in logprobs["top_logprobs"]), logprobs


def _chat_logprobs(top: int | None):
    def check(ask: Asker, engine) -> None:
        body = ask.ok({"logprobs": True, **({"top_logprobs": top} if top is not None else {}), "max_tokens": 3,
                       "logit_bias": NO_EOS})
        tokens = body["choices"][0]["logprobs"]["content"]
        assert len(tokens) == 3 and all(len(t["top_logprobs"]) == (top or 0) for t in tokens), tokens
    return check


def _json(ask: Asker, engine) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    body = ask.ok({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
                   "max_tokens": 40, "temperature": 0})
    assert isinstance(json.loads(_texts(body)[0])["a"], int), body


def _forced_tool_call(ask: Asker, engine) -> None:
    tools = example(CHAT, "tools")
    body = ask.ok({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "fetch"}},
                   "max_tokens": 40, "temperature": 0})
    calls = body["choices"][0]["message"].get("tool_calls") or []
    assert [call["function"]["name"] for call in calls] == ["fetch"], body


CHECKS = {
    (COMPLETIONS, "prompt"): _list_of_prompts,
    (COMPLETIONS, "n"): _choices_and_their_usage,
    (COMPLETIONS, "max_tokens"): _length("max_tokens"),
    (COMPLETIONS, "stop"): _stop,
    (COMPLETIONS, "logit_bias"): _logit_bias,
    (COMPLETIONS, "seed"): _seed,
    (COMPLETIONS, "logprobs"): _completion_logprobs,
    (CHAT, "n"): _choices_and_their_usage,
    (CHAT, "max_tokens"): _length("max_tokens"),
    (CHAT, "max_completion_tokens"): _length("max_completion_tokens"),
    (CHAT, "stop"): _stop,
    (CHAT, "logit_bias"): _logit_bias,
    (CHAT, "seed"): _seed,
    (CHAT, "logprobs"): _chat_logprobs(None),
    (CHAT, "top_logprobs"): _chat_logprobs(2),
    (CHAT, "response_format"): _json,
    (CHAT, "tool_choice"): _forced_tool_call,
}
