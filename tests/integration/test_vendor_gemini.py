"""The gateway in front of a fake Gemini API: what it sends, what it answers."""

from __future__ import annotations

import json

import pytest

from tests.contract.fuzz import short_fuzz
from tests.support.bodies import chunks_of, sse_events, streamed
from tests.support.environments import GEMINI_SECRET
from tests.support.provision import ledger_row


def test_parameters_map_to_generation_config(vclient, gemini_upstream, database):
    body = {"model": "gemini/gemini-2.5-flash", "prompt": "Say hi", "max_tokens": 3, "temperature": 1.5,
            "top_p": 0.9, "seed": 42, "presence_penalty": 0.5, "frequency_penalty": -0.5, "stop": ["zz"]}
    r = vclient.post("/v5/completions", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["choices"] == [{"index": 0, "text": " s42w0 s42w1 s42w2", "finish_reason": "length", "logprobs": None}]
    assert data["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5,
                             "prompt_tokens_details": {"cached_tokens": 0}}
    (sent,) = gemini_upstream.requests
    assert sent["path"] == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert sent["body"] == {
        "contents": [{"role": "user", "parts": [{"text": "Say hi"}]}],
        "generationConfig": {"maxOutputTokens": 3, "temperature": 1.5, "topP": 0.9, "seed": 42,
                             "presencePenalty": 0.5, "frequencyPenalty": -0.5, "stopSequences": ["zz"]},
    }  # fmt: skip
    assert sent["headers"]["x-goog-api-key"] == GEMINI_SECRET and sent["query"] == {}
    assert database.key not in json.dumps(sent["headers"])


@pytest.mark.parametrize("stream", [False, True])
def test_user_is_recorded_not_sent(vclient, gemini_upstream, database, stream):
    r = vclient.post("/v5/completions", json={"model": "gemini/g", "prompt": "x", "max_tokens": 1, "user": "u-1",
                                              "stream": stream})
    assert r.status_code == 200, r.text
    assert "u-1" not in json.dumps(gemini_upstream.requests[0]["body"])
    assert ledger_row(database.url, "acct-a", r.headers["x-request-id"])["end_user"] == "u-1"


def test_n_is_candidate_count_up_to_max_candidates_then_fan_out(vclient, gemini_upstream):
    r = vclient.post("/v5/completions", json={"model": "gemini/g", "prompt": "x", "n": 6, "seed": 10,
                                              "max_tokens": 1})
    assert r.status_code == 200, r.text
    texts = [c["text"] for c in r.json()["choices"]]
    # First call: candidateCount 4 with seed 10; second: candidateCount 2 with seed 10 + 4.
    assert texts == [" s10c0w0", " s10c1w0", " s10c2w0", " s10c3w0", " s14c0w0", " s14c1w0"]
    configs = sorted((req["body"]["generationConfig"] for req in gemini_upstream.requests), key=lambda c: c["seed"])
    assert [(c["candidateCount"], c["seed"]) for c in configs] == [(4, 10), (2, 14)]
    # Two calls read the prompt (one word); the client is told it once, as OpenAI counts.
    assert r.json()["usage"]["completion_tokens"] == 6 and r.json()["usage"]["prompt_tokens"] == 1


@pytest.mark.parametrize(("seed", "sent"), [
    (2**31 - 3, [2**31 - 3, -(2**31) + 1]),  # the second call's seed + 4 is beyond int32: wrapped
    (2**63 - 1, [-1, 3]),  # the contract's largest seed
    (-(2**63), [0, 4]),  # and its smallest
    (-(2**31), [-(2**31), -(2**31) + 4]),  # in range: sent as it is
])
def test_seeds_wrap_into_geminis_int32(vclient, gemini_upstream, seed, sent):
    r = vclient.post("/v5/completions", json={"model": "gemini/g", "prompt": "x", "n": 6, "seed": seed,
                                              "max_tokens": 1})
    assert r.status_code == 200, r.text
    configs = sorted((req["body"]["generationConfig"] for req in gemini_upstream.requests),
                     key=lambda c: c["candidateCount"], reverse=True)
    assert [c["seed"] for c in configs] == sent  # the fake checks each is an int32 (vclient: no violations)
    again = vclient.post("/v5/completions", json={"model": "gemini/g", "prompt": "x", "n": 6, "seed": seed,
                                                  "max_tokens": 1})
    assert again.json()["choices"] == r.json()["choices"]  # deterministic


def test_one_candidate_per_call_by_default(vclient, gemini_upstream):
    r = vclient.post("/v5/completions", json={"model": "gemini1/g", "prompt": ["a", "b"], "n": 2, "max_tokens": 1})
    assert [c["index"] for c in r.json()["choices"]] == [0, 1, 2, 3]
    assert len(gemini_upstream.requests) == 4
    assert all("candidateCount" not in req["body"]["generationConfig"] for req in gemini_upstream.requests)


def test_logprobs_come_back_in_the_legacy_shape(vclient, gemini_upstream):
    r = vclient.post("/v5/completions", json={"model": "gemini/g", "prompt": "x", "max_tokens": 2, "logprobs": 2})
    lp = r.json()["choices"][0]["logprobs"]
    assert lp == {"tokens": [" w0", " w1"], "token_logprobs": [-1.0, -1.01],
                  "top_logprobs": [{" w0": -1.0, " alt0": -2.0}, {" w1": -1.01, " alt0": -2.01}],
                  "text_offset": [0, 3]}
    config = gemini_upstream.requests[0]["body"]["generationConfig"]
    assert config["responseLogprobs"] is True and config["logprobs"] == 2


@pytest.mark.parametrize("stream", [False, True])
def test_top_logprobs_always_hold_the_chosen_token(vclient, gemini_upstream, stream):
    """Gemini's top candidates need not include the chosen one (with logprobs 0 the fake sends
    none); OpenAI's always do, so logprobs 0 gives the chosen token alone."""
    r = vclient.post("/v5/completions", json={"model": "gemini/g", "prompt": "x", "max_tokens": 2, "logprobs": 0,
                                              "stream": stream})
    assert r.status_code == 200, r.text
    pieces = [c["logprobs"] for chunk in chunks_of(r.text) for c in chunk["choices"] if c["logprobs"]] if stream \
        else [r.json()["choices"][0]["logprobs"]]
    tops = [top for lp in pieces for top in lp["top_logprobs"]]
    assert tops == [{" w0": -1.0}, {" w1": -1.01}]
    assert gemini_upstream.requests[0]["body"]["generationConfig"]["logprobs"] == 0


@pytest.mark.parametrize(("model", "finish"), [("g", "length"), ("safety", "content_filter"),
                                               ("blocked", "content_filter")])
@pytest.mark.parametrize("stream", [False, True])
def test_finish_reasons(vclient, model, finish, stream):
    r = vclient.post("/v5/completions", json={"model": f"gemini/{model}", "prompt": "x", "max_tokens": 3, "n": 2,
                                              "stream": stream})
    assert r.status_code == 200, r.text
    if stream:
        assert streamed(r.text)[1] == {0: [finish], 1: [finish]}
    else:
        assert [c["finish_reason"] for c in r.json()["choices"]] == [finish, finish]


def test_stop_sequence_finishes_with_stop(vclient):
    r = vclient.post("/v5/completions", json={"model": "gemini/g", "prompt": "x", "max_tokens": 5, "stop": "w2"})
    assert r.json()["choices"][0] == {"index": 0, "text": " w0 w1 ", "finish_reason": "stop", "logprobs": None}


@pytest.mark.parametrize("stream", [False, True])
def test_thoughts_are_reasoning_tokens_and_not_text(vclient, stream):
    body = {"model": "gemini/thinking", "prompt": "x", "max_tokens": 2, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    r = vclient.post("/v5/completions", json=body)
    text = streamed(r.text)[0][0] if stream else r.json()["choices"][0]["text"]
    usage = chunks_of(r.text)[-1]["usage"] if stream else r.json()["usage"]
    assert text == " w0 w1"
    assert usage["completion_tokens"] == 2 + 5 and usage["completion_tokens_details"] == {"reasoning_tokens": 5}


def test_cached_content_is_cached_tokens(vclient):
    r = vclient.post("/v5/completions", json={"model": "gemini/cached", "prompt": "a b c", "max_tokens": 1})
    assert r.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 4}


def test_stream_interleaves_candidates_with_logprobs_and_usage(vclient, gemini_upstream):
    r = vclient.post("/v5/completions", json={"model": "gemini/g", "prompt": "x", "n": 2, "max_tokens": 2,
                                              "logprobs": 1, "stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200, r.text
    texts, finishes, chunks = streamed(r.text)
    assert texts == {0: " c0w0 c0w1", 1: " c1w0 c1w1"} and finishes == {0: ["length"], 1: ["length"]}
    offsets = [ch["logprobs"]["text_offset"] for c in chunks for ch in c["choices"]
               if ch["index"] == 1 and ch.get("logprobs") and ch["logprobs"]["tokens"]]
    assert offsets == [[0], [5]]
    assert chunks[-1]["usage"] == {"prompt_tokens": 1, "completion_tokens": 4, "total_tokens": 5,
                                   "prompt_tokens_details": {"cached_tokens": 0}}
    (sent,) = gemini_upstream.requests
    assert sent["path"].endswith(":streamGenerateContent") and sent["query"] == {"alt": ["sse"]}


def test_stream_cut_before_every_candidate_finished_is_an_error_event(vclient):
    r = vclient.post("/v5/completions", json={"model": "gemini/cut-stream", "prompt": "x", "stream": True})
    assert r.status_code == 200
    events = sse_events(r.text)
    error = json.loads(events[-2]["data"])["error"]
    assert error["vendor"] == "gemini" and "before every candidate finished" in error["message"]


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [("bad-key", 502, "vendor_auth"), ("fail-400", 400, "vendor_rejected"), ("fail-404", 404, "vendor_not_found"),
     ("fail-429", 429, "vendor_rate_limited"), ("fail-503", 502, "vendor_error")],
)
@pytest.mark.parametrize("stream", [False, True])
def test_vendor_errors_are_translated_without_credentials(vclient, model, status, code, stream):
    r = vclient.post("/v5/completions", json={"model": f"gemini/{model}", "prompt": "x", "stream": stream})
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code and r.json()["error"]["vendor"] == "gemini"
    assert GEMINI_SECRET not in r.text


def test_model_name_cannot_escape_the_model_path(vclient, gemini_upstream):
    r = vclient.post("/v5/completions", json={"model": "gemini/../../x?key=1", "prompt": "x"})
    assert r.status_code == 404, r.text  # the vendor has no model of that name
    # Sent as the adapter quoted it (aiohttp's URL class used to unquote the "=" on the way)
    assert gemini_upstream.raw_paths == [b"/v1beta/models/..%2F..%2Fx%3Fkey%3D1:generateContent"]


def test_best_of_ranks_candidates_by_cumulative_logprob(vclient, gemini_upstream):
    r = vclient.post("/v5/completions", json={"model": "gemini/g", "prompt": ["x", "y"], "n": 2, "best_of": 4,
                                              "max_tokens": 2})
    assert r.status_code == 200, r.text
    data = r.json()
    # Candidate 2 scores best, then 0 and 3 tie (the vendor's order decides), then 1.
    assert [(c["index"], c["text"]) for c in data["choices"]] == [(0, " c2w0 c2w1"), (1, " c0w0 c0w1"),
                                                                   (2, " c2w0 c2w1"), (3, " c0w0 c0w1")]
    assert all(c["logprobs"] is None for c in data["choices"])  # the client did not ask
    assert data["usage"]["completion_tokens"] == 2 * 4 * 2  # every candidate is billed
    configs = [req["body"]["generationConfig"] for req in gemini_upstream.requests]
    assert [(c["candidateCount"], c["responseLogprobs"], c["logprobs"]) for c in configs] == [(4, True, 0)] * 2


def test_best_of_keeps_logprobs_when_asked(vclient):
    r = vclient.post("/v5/completions", json={"model": "gemini/g", "prompt": "x", "best_of": 3, "max_tokens": 1,
                                              "logprobs": 1})
    (choice,) = r.json()["choices"]
    assert choice["text"] == " c2w0" and choice["logprobs"]["token_logprobs"] == [-0.5]


def test_fuzz_finds_nothing(vendors_gateway, gemini_upstream, database):
    """Schemathesis (all checks, and tests/contract/fuzz_hooks.py's: every 400 of a valid request must be a
    parameter the capability map says the vendor cannot serve), through to the fake, which checks
    every request it gets against the vendor's documented shape."""
    gemini_upstream.clear()
    outcome = short_fuzz("gemini", vendors_gateway.url, database.key)
    assert outcome.returncode == 0, outcome.summary()
    assert outcome.calls["positive 200"] > 0 and outcome.calls["chat positive 200"] > 0, outcome.summary()
    assert gemini_upstream.violations == []
