"""POST /v5/inference on the embedded model: llama.cpp's native /completion body, through a real
`gateway serve` and scale-gp-beta's `inference.create`, answered in /completion's own shape and
billed from its counts (`tokens_evaluated`, `tokens_predicted`)."""

from __future__ import annotations

import json

from scale_gp_beta import SGPClient

from tests.support.chat import row as ledger_row

PROMPT = "The capital of France is"


def test_sdk_native_completion_body_is_answered_as_llamacpp_answers_it(local_gateway, database):
    sgp = SGPClient(api_key=database.key, account_id="acct-a", base_url=local_gateway.url, max_retries=0)
    raw = sgp.inference.with_raw_response.create(model="local/smollm2-135m",
                                                 args={"prompt": PROMPT, "n_predict": 4, "temperature": 0})
    answer = raw.parse().response
    assert answer["stop"] is True and answer["stop_type"] == "limit"
    assert isinstance(answer["content"], str) and answer["content"]
    assert answer["tokens_predicted"] == 4 and answer["tokens_evaluated"] >= 5
    row = ledger_row(database.url, raw.headers["x-request-id"])
    assert (row["endpoint"], row["estimated"]) == ("inference", False)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (answer["tokens_evaluated"], 4)


def test_a_stream_is_llamacpps_events_ending_with_stop(local, database):
    answer = local.post("/v5/inference", json={"model": "local/smollm2-135m",
                                               "args": {"prompt": PROMPT, "n_predict": 3, "temperature": 0,
                                                        "stream": True}})
    assert answer.status_code == 200
    data = [line.removeprefix("data: ") for line in answer.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d)["response"] for d in data[:-1]]
    assert all(c["stop"] is False and c["content"] for c in chunks[:-1])
    last = chunks[-1]
    assert last["stop"] is True and last["tokens_predicted"] == 3
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert (row["streamed"], row["completion_tokens"], row["prompt_tokens"]) == (True, 3, last["tokens_evaluated"])


def test_the_native_body_is_checked_before_the_engine_runs(local):
    for args, param in [({"prompt": PROMPT, "model": "other"}, "args.model"),
                        ({"prompt": PROMPT, "api_base": "http://x"}, "args.api_base"),
                        ({"prompt": PROMPT, "n_predict": "many"}, "args.n_predict"),
                        ({"prompt": PROMPT, "n_predict": 2, "n_probs": 3}, "args.n_probs"),
                        ({"prompt": [PROMPT, "two"], "n_predict": 2}, "args.prompt")]:
        answer = local.post("/v5/inference", json={"model": "local/smollm2-135m", "args": args})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}
    answer = local.post("/v5/inference", json={"model": "local/smollm2-135m",
                                               "args": {"prompt": PROMPT, "n_predict": 2, "json_schema": schema}})
    assert answer.status_code == 422 and "json_schema" in answer.text
