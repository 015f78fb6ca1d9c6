"""POST /v5/inference on the `http` protocol: a self-hosted server's own API, configured by the
operator (docs/inference.md). TGI's /generate and /generate_stream through the fake TGI
(tests/support/fakes/tgi.py refuses anything TGI would not take), and llama.cpp's own server
(xllamacpp, in this process) through its native /completion, with scale-gp-beta's
`inference.create`; billed from the counts at the operator's pointers, or counted and flagged."""

from __future__ import annotations

import json

import httpx
import pytest
from scale_gp_beta import SGPClient

from tests.support.chat import row as ledger_row
from tests.support.environments import LOCAL_TIMEOUT, SHARED_TLS
from tests.support.fakes.server import serve
from tests.support.fakes.tgi import FakeTGI
from tests.support.gateway_process import GatewayProcess

TGI_TOKEN = "hf-tgi-secret-never-leak"
TGI = {"PATH": "/generate", "STREAM_PATH": "/generate_stream", "STREAM_FLAG": "/stream",
       "STREAM_END": "/generated_text", "COMPLETION_TOKENS": "/details/generated_tokens",
       "STREAM_PROMPT_TOKENS": "/details/input_length", "STREAM_COMPLETION_TOKENS": "/details/generated_tokens",
       "COMPLETION_TEXT": "/generated_text", "STREAM_COMPLETION_TEXT": "/token/text",
       "OUTPUT_BOUND": "/parameters/max_new_tokens", "OUTPUT_BOUND_DEFAULT": "100", "CHECKED_OBJECTS": "/parameters",
       "RETRIES": "0", "FIRST_BYTE": "2", "IDLE": "2"}  # fmt: skip
LLAMACPP = {"PATH": "/completion", "STREAM_FLAG": "/stream", "STREAM_END": "/stop",
            "PROMPT_TOKENS": "/tokens_evaluated", "COMPLETION_TOKENS": "/tokens_predicted",
            "STREAM_PROMPT_TOKENS": "/tokens_evaluated", "STREAM_COMPLETION_TOKENS": "/tokens_predicted",
            "COMPLETION_TEXT": "/content", "STREAM_COMPLETION_TEXT": "/content", "OUTPUT_BOUND": "/n_predict"}


def _vendor(name: str, base_url: str, options: dict[str, str], key: str | None = None) -> dict[str, str]:
    prefix = f"GATEWAY_VENDOR_{name.upper()}_"
    env = {prefix + "PROTOCOL": "http", prefix + "BASE_URL": base_url} | {prefix + k: v for k, v in options.items()}
    return env | ({prefix + "API_KEY": key} if key else {})


@pytest.fixture(scope="module")
def tgi():
    yield from serve(FakeTGI(token=TGI_TOKEN))


@pytest.fixture(scope="module")
def http_gateway(tgi, engine, database):
    env = {"GATEWAY_DATABASE_URL": database.url, "GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_VALIDATE_RESPONSES": "1",
           **_vendor("tgi", tgi.url, TGI, TGI_TOKEN), **_vendor("llamacpp", engine.url, LLAMACPP)}
    with GatewayProcess(env) as process:
        yield process


@pytest.fixture
def client(http_gateway, tgi, database):
    tgi.clear()
    with httpx.Client(base_url=http_gateway.url, headers={"x-api-key": database.key}, timeout=LOCAL_TIMEOUT,
                      verify=SHARED_TLS) as c:
        yield c
    assert tgi.violations == []


def _data(answer: httpx.Response) -> list[str]:
    return [line.removeprefix("data: ") for line in answer.text.splitlines() if line.startswith("data: ")]


def test_tgi_generate_with_details_is_billed_from_its_counts(client, database, tgi):
    args = {"inputs": "Deep learning is", "parameters": {"max_new_tokens": 3, "details": True}}
    answer = client.post("/v5/inference", json={"model": "tgi/mistral", "args": args})
    assert answer.status_code == 200, answer.text
    response = answer.json()["response"]
    assert response["generated_text"] == " w0 w1 w2" and response["details"]["generated_tokens"] == 3
    sent = tgi.requests[0]
    assert sent["path"] == "/generate" and sent["body"] == args
    assert sent["headers"]["authorization"] == f"Bearer {TGI_TOKEN}"
    # TGI's plain answer has no prompt count: the gateway counts the prompt, and says so.
    assert answer.headers["x-gateway-usage-estimated"] == "true"
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert (row["endpoint"], row["completion_tokens"], row["estimated"]) == ("inference", 3, True)
    assert row["prompt_tokens"] > 0


def test_tgi_stream_goes_to_generate_stream_without_the_flag(client, database, tgi):
    args = {"inputs": "Deep learning is", "parameters": {"max_new_tokens": 3, "details": True}, "stream": True}
    answer = client.post("/v5/inference", json={"model": "tgi/mistral", "args": args})
    data = _data(answer)
    assert data[-1] == "[DONE]"
    events = [json.loads(d)["response"] for d in data[:-1]]
    assert "".join(e["token"]["text"] for e in events) == " w0 w1 w2"
    assert events[-1]["generated_text"] == " w0 w1 w2"
    sent = tgi.requests[0]
    assert sent["path"] == "/generate_stream" and "stream" not in sent["body"]
    row = ledger_row(database.url, answer.headers["x-request-id"])
    details = events[-1]["details"]
    assert (row["prompt_tokens"], row["completion_tokens"], row["estimated"]) == (
        details["input_length"], details["generated_tokens"], False)


@pytest.mark.parametrize(("inputs", "status"), [("fail-500", 502), ("garbage", 502), ("huge-count", 502)])
def test_tgi_faults_are_502_unbilled_and_leak_no_key(client, database, inputs, status):
    answer = client.post("/v5/inference", json={"model": "tgi/mistral",
                                                "args": {"inputs": inputs, "parameters": {"details": True}}})
    assert answer.status_code == status and TGI_TOKEN not in answer.text
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert not row["prompt_tokens"] and not row["completion_tokens"]


def test_tgis_own_validation_error_comes_back_as_a_4xx(client, tgi):
    answer = client.post("/v5/inference", json={"model": "tgi/mistral",
                                                "args": {"inputs": "x", "parameters": {"temperature": -1}}})
    assert 400 <= answer.status_code < 500 and answer.json()["error"]["code"] == "vendor_rejected"
    assert "temperature" in answer.json()["error"]["message"]
    tgi.violations.clear()


@pytest.mark.parametrize(("args", "param"), [({"inputs": "x", "parameters": {"adapter_url": "http://x"}},
                                              "args.parameters.adapter_url"),
                                             ({"inputs": "x", "model": "m"}, "args.model")])
def test_tgi_routing_members_are_refused(client, tgi, args, param):
    answer = client.post("/v5/inference", json={"model": "tgi/mistral", "args": args})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param
    assert tgi.requests == []


def test_llamacpps_own_server_speaks_completion_through_http(http_gateway, database):
    sgp = SGPClient(api_key=database.key, account_id="acct-a", base_url=http_gateway.url, max_retries=0,
                    timeout=LOCAL_TIMEOUT)
    raw = sgp.inference.with_raw_response.create(model="llamacpp/smollm2",
                                                 args={"prompt": "The capital of France is", "n_predict": 4,
                                                       "temperature": 0})
    answer = raw.parse().response
    assert answer["stop"] is True and answer["tokens_predicted"] == 4 and answer["content"]
    row = ledger_row(database.url, raw.headers["x-request-id"])
    assert (row["prompt_tokens"], row["completion_tokens"], row["estimated"]) == (
        answer["tokens_evaluated"], 4, False)


def test_llamacpps_own_server_streams_completion(client, database):
    answer = client.post("/v5/inference", json={"model": "llamacpp/smollm2", "args": {
        "prompt": "The capital of France is", "n_predict": 3, "temperature": 0, "stream": True}})
    data = _data(answer)
    assert data[-1] == "[DONE]"
    events = [json.loads(d)["response"] for d in data[:-1]]
    assert events[-1]["stop"] is True
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert (row["completion_tokens"], row["estimated"]) == (events[-1]["tokens_predicted"], False)


def test_an_http_vendor_is_listed_serving_no_openai_endpoint(client):
    vendors = {v["name"]: v for v in client.get("/v5/vendors").json()["data"]}
    tgi = vendors["tgi"]
    assert tgi["protocol"] == "http" and tgi["deployments"][0]["name"]
    assert {found["support"] for found in tgi["parameters"].values()} == {"unsupported"}
    answer = client.post("/v5/completions", json={"model": "tgi/mistral", "prompt": "x"})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "unsupported_endpoint"
