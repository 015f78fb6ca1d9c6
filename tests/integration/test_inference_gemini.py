"""POST /v5/inference on the gemini protocol: the client's GenerateContentRequest (safety settings
included) against the fake Gemini API (tests/support/fakes/gemini_upstream.py checks each request;
`vclient` fails a test whose request broke it), plain and streamed, billed from usageMetadata."""

from __future__ import annotations

import json

import pytest

from tests.support.chat import row as ledger_row
from tests.support.environments import GEMINI_SECRET

CONTENTS = [{"role": "user", "parts": [{"text": "hello there"}]}]
SAFETY = [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH"},
          {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "threshold": "BLOCK_NONE"}]


def test_generate_content_with_safety_settings_as_written(vclient, database, gemini_upstream):
    args = {"contents": CONTENTS, "safetySettings": SAFETY, "generationConfig": {"maxOutputTokens": 3}}
    answer = vclient.post("/v5/inference", json={"model": "gemini1/gemini-x", "args": args})
    assert answer.status_code == 200, answer.text
    response = answer.json()["response"]
    assert response["candidates"][0]["finishReason"] == "MAX_TOKENS"
    sent = gemini_upstream.requests[0]
    assert sent["path"].endswith("/models/gemini-x:generateContent") and sent["body"] == args
    assert sent["headers"]["x-goog-api-key"] == GEMINI_SECRET
    row = ledger_row(database.url, answer.headers["x-request-id"])
    usage = response["usageMetadata"]
    assert (row["endpoint"], row["estimated"]) == ("inference", False)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (usage["promptTokenCount"],
                                                                usage["candidatesTokenCount"])


def test_thoughts_are_billed_as_completion(vclient, database):
    answer = vclient.post("/v5/inference", json={"model": "gemini1/thinking", "args": {"contents": CONTENTS}})
    usage = answer.json()["response"]["usageMetadata"]
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert row["completion_tokens"] == usage["candidatesTokenCount"] + usage["thoughtsTokenCount"]


def test_stream_goes_to_stream_generate_content_and_the_flag_is_not_sent(vclient, database, gemini_upstream):
    args = {"contents": CONTENTS, "safetySettings": SAFETY, "generationConfig": {"maxOutputTokens": 3},
            "stream": True}
    answer = vclient.post("/v5/inference", json={"model": "gemini1/gemini-x", "args": args})
    assert answer.status_code == 200
    data = [line.removeprefix("data: ") for line in answer.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    events = [json.loads(d)["response"] for d in data[:-1]]
    assert events[-1]["candidates"][0]["finishReason"] == "MAX_TOKENS"
    text = "".join(p["text"] for e in events for p in e["candidates"][0]["content"]["parts"])
    assert text == " w0 w1 w2"
    sent = gemini_upstream.requests[0]
    assert sent["path"].endswith(":streamGenerateContent") and sent["query"]["alt"] == ["sse"]
    assert "stream" not in sent["body"]
    row = ledger_row(database.url, answer.headers["x-request-id"])
    assert (row["streamed"], row["completion_tokens"]) == (True, events[-1]["usageMetadata"]["candidatesTokenCount"])


@pytest.mark.parametrize(("args", "param", "code"), [
    ({"contents": CONTENTS, "cachedContent": "cachedContents/abc"}, "args.cachedContent", "shared_vendor_state"),
    ({"contents": CONTENTS, "model": "gemini-x"}, "args.model", "model_mismatch"),
    ({"contents": CONTENTS, "generationConfig": {"endpoint": "x"}}, "args.generationConfig.endpoint",
     "routing_in_args"),
    ({"contents": CONTENTS, "generationConfig": {"maxOutputTokens": -1}}, "args.generationConfig.maxOutputTokens",
     "invalid_output_bound"),
])  # fmt: skip
def test_refused_by_name(vclient, gemini_upstream, args, param, code):
    answer = vclient.post("/v5/inference", json={"model": "gemini1/gemini-x", "args": args})
    assert answer.status_code == 400
    assert (answer.json()["error"]["param"], answer.json()["error"]["code"]) == (param, code)
    assert gemini_upstream.requests == []


def test_a_bad_safety_setting_is_geminis_400_passed_back(vclient, gemini_upstream):
    args = {"contents": CONTENTS, "safetySettings": [{"category": "HARM_CATEGORY_NOPE", "threshold": "OFF"}]}
    answer = vclient.post("/v5/inference", json={"model": "gemini1/gemini-x", "args": args})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "vendor_rejected"
    assert "safetySettings[0]" in answer.json()["error"]["message"]
    gemini_upstream.violations.clear()
