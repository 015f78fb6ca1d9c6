"""The gateway in front of a fake OpenAI-compatible vendor: what it sends, what it answers."""

from __future__ import annotations

import json

import httpx
import pytest

from gateway.core.errors import ValidationFailed
from tests.support.bodies import chunks_of, sse_events
from tests.support.environments import SHARED_TLS, UPSTREAM_SECRET


def test_plain_completion_passes_parameters_and_shapes_answer(client, upstream, database):
    body = {"model": "fake/gpt-x", "prompt": "Say hi", "max_tokens": 3, "temperature": 0.5, "top_p": 0.9,
            "frequency_penalty": 0.1, "presence_penalty": -0.2, "seed": 42, "user": "u-1",
            "logit_bias": {"50256": -100}, "stop": ["zz"]}
    r = client.post("/v5/completions", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["object"] == "text_completion"
    assert data["model"] == "fake/gpt-x"
    assert data["id"].startswith("cmpl-") and r.headers["x-request-id"] == data["id"]
    assert data["choices"] == [{"index": 0, "text": " w0 w1 w2", "finish_reason": "length", "logprobs": None}]
    assert data["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5,
                             "prompt_tokens_details": {"cached_tokens": 0}}
    assert data["system_fingerprint"] == "fp_fake"
    (sent,) = upstream.requests
    assert sent["body"] == {"model": "gpt-x", "prompt": "Say hi", "max_tokens": 3, "temperature": 0.5, "top_p": 0.9,
                            "frequency_penalty": 0.1, "presence_penalty": -0.2, "seed": 42, "user": "u-1",
                            "logit_bias": {"50256": -100}, "stop": ["zz"]}
    # The vendor gets the gateway's credentials, never the client's key.
    assert sent["headers"]["authorization"] == f"Bearer {UPSTREAM_SECRET}"
    assert database.key not in json.dumps(sent["headers"])
    assert "x-api-key" not in sent["headers"]


def test_default_max_tokens_is_the_contracts_16(client, upstream):
    r = client.post("/v5/completions", json={"model": "fake/m", "prompt": "x"})
    assert r.status_code == 200
    assert upstream.requests[0]["body"]["max_tokens"] == 16
    assert r.json()["usage"]["completion_tokens"] == 16


def test_list_prompts_with_n_are_indexed_prompt_major(client, upstream):
    r = client.post("/v5/completions", json={"model": "fake/m", "prompt": ["a", "b b", "c"], "n": 2,
                                             "max_tokens": 1, "echo": True})
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3, 4, 5]
    assert [c["text"] for c in choices] == ["a w0", "a w0", "b b w0", "b b w0", "c w0", "c w0"]
    assert upstream.requests[0]["body"]["prompt"] == ["a", "b b", "c"]
    assert upstream.requests[0]["body"]["n"] == 2
    assert upstream.requests[0]["body"]["echo"] is True


def test_logprobs_pass_through_in_legacy_shape(client):
    r = client.post("/v5/completions", json={"model": "fake/m", "prompt": "x", "max_tokens": 2, "logprobs": 3})
    lp = r.json()["choices"][0]["logprobs"]
    assert lp["tokens"] == [" w0", " w1"]
    assert lp["text_offset"] == [0, 3]
    assert len(lp["top_logprobs"][0]) == 3


def test_stop_sequence_reaches_vendor_and_finish_reason_is_stop(client, upstream):
    r = client.post("/v5/completions", json={"model": "fake/m", "prompt": "x", "stop": " w2", "max_tokens": 8})
    assert r.json()["choices"][0] == {"index": 0, "text": " w0 w1", "finish_reason": "stop", "logprobs": None}
    assert upstream.requests[0]["body"]["stop"] == [" w2"]


def test_null_means_not_set(client, upstream):
    r = client.post("/v5/completions", json={"model": "fake/m", "prompt": "x", "temperature": None, "stop": None,
                                             "logprobs": None, "n": None, "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert upstream.requests[0]["body"] == {"model": "m", "prompt": "x", "max_tokens": 2}


def test_stream_without_usage(client, upstream):
    r = client.post("/v5/completions", json={"model": "fake/m", "prompt": ["p", "q"], "n": 2, "max_tokens": 2,
                                             "stream": True})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == {"event": "done", "data": "[DONE]"}
    chunks = chunks_of(r.text)
    assert {c["id"] for c in chunks} == {r.headers["x-request-id"]}
    assert len({c["created"] for c in chunks}) == 1 and {c["model"] for c in chunks} == {"fake/m"}
    assert all("usage" not in c for c in chunks)
    assert all(choice["logprobs"] is None for c in chunks for choice in c["choices"])  # as OpenAI sends it
    texts: dict[int, str] = {}
    finishes: dict[int, list[str]] = {}
    for c in chunks:
        for choice in c["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
            if choice["finish_reason"]:
                finishes.setdefault(choice["index"], []).append(choice["finish_reason"])
    assert texts == {i: " w0 w1" for i in range(4)}
    assert finishes == {i: ["length"] for i in range(4)}
    # The gateway always asks the vendor for usage.
    assert upstream.requests[0]["body"]["stream_options"] == {"include_usage": True}


def test_stream_with_usage_ends_with_usage_chunk(client):
    r = client.post("/v5/completions", json={"model": "fake/m", "prompt": "a b c", "max_tokens": 3, "stream": True,
                                             "stream_options": {"include_usage": True}})
    chunks = chunks_of(r.text)
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6,
                                   "prompt_tokens_details": {"cached_tokens": 0}}
    assert sum("usage" in c for c in chunks) == 1


def test_stream_logprobs_per_chunk(client):
    r = client.post("/v5/completions", json={"model": "fake/m", "prompt": "x", "max_tokens": 2, "stream": True,
                                             "logprobs": 1})
    with_lp = [c["choices"][0]["logprobs"] for c in chunks_of(r.text) if c["choices"][0].get("logprobs")]
    assert [lp["tokens"] for lp in with_lp] == [[" w0"], [" w1"]]
    assert [lp["text_offset"] for lp in with_lp] == [[0], [3]]


@pytest.mark.parametrize(
    ("headers", "status", "type_"),
    [
        ({}, 401, "authentication_error"),
        ({"x-api-key": "wrong"}, 401, "authentication_error"),
        ({"authorization": "Bearer wrong"}, 401, "authentication_error"),
        ({"x-api-key": "key", "x-selected-account-id": "acct-b"}, 403, "permission_error"),
        ({"x-api-key": "multi_key"}, 400, "invalid_request_error"),
    ],
)
def test_auth_failures(gateway, database, headers, status, type_):
    # "key" and "multi_key" stand for the session's keys, which exist only once the database does.
    headers = {name: getattr(database, value, value) for name, value in headers.items()}
    r = httpx.post(f"{gateway.url}/v5/completions", json={"model": "fake/m", "prompt": "x"}, headers=headers,
                   verify=SHARED_TLS)
    assert r.status_code == status, r.text
    assert r.json()["error"]["type"] == type_


def test_a_client_without_a_key_is_told_how_to_send_one(gateway):
    """The message survives the gateway's own secret scrubber whole: it names both ways of sending
    a key and nothing in it reads as a secret."""
    r = httpx.post(f"{gateway.url}/v5/completions", json={"model": "fake/m", "prompt": "x"}, verify=SHARED_TLS)
    assert r.status_code == 401
    message = r.json()["error"]["message"]
    assert "[redacted]" not in message
    assert "x-api-key" in message and "Authorization" in message and "bearer" in message.lower()


def test_bearer_and_account_selection_work(gateway, database):
    for headers in ({"authorization": f"Bearer {database.key}"},
                    {"x-api-key": database.multi_key, "x-selected-account-id": "acct-b"}):
        r = httpx.post(f"{gateway.url}/v5/completions", json={"model": "fake/m", "prompt": "x", "max_tokens": 1},
                       headers=headers, verify=SHARED_TLS)
        assert r.status_code == 200, r.text


def test_unknown_vendor_lists_configured_ones(client):
    r = client.post("/v5/completions", json={"model": "nope/m", "prompt": "x"})
    assert r.status_code == 404
    error = r.json()["error"]
    assert error["code"] == "unknown_vendor" and error["vendor"] == "nope" and error["param"] == "model"
    assert "fake" in error["message"]


@pytest.mark.parametrize(
    ("body", "locs"),
    [
        ({}, [["body", "model"], ["body", "prompt"]]),
        ({"model": "no-slash", "prompt": "x"}, [["body", "model"]]),
        ({"model": "fake/m", "prompt": [], "temperature": 3, "logprobs": 6, "stop": ["a", "b", "c", "d", "e"],
          "n": 0, "top_p": 1.5, "frequency_penalty": -3, "logit_bias": {"1": 101}, "bogus": 1},
         [["body", "prompt"], ["body", "temperature"], ["body", "logprobs"], ["body", "stop"], ["body", "n"],
          ["body", "top_p"], ["body", "frequency_penalty"], ["body", "logit_bias", "1"], ["body", "bogus"]]),
        ({"model": "fake/m", "prompt": "x", "stream_options": {"include_usage": True}}, [["body", "stream_options"]]),
        ({"model": "fake/m", "prompt": "x", "stream": True, "best_of": 2}, [["body", "best_of"]]),
        ({"model": "fake/m", "prompt": "x", "n": 3, "best_of": 2}, [["body", "best_of"]]),
        ([1, 2], [["body"]]),
    ],
)
def test_invalid_bodies_get_422_listing_every_problem(client, upstream, body, locs):
    r = client.post("/v5/completions", json=body)
    assert r.status_code == 422, r.text
    assert r.headers["x-should-retry"] == "false"
    detail, error = r.json()["detail"], r.json()["error"]
    assert sorted(d["loc"] for d in detail) == sorted(locs)
    assert all(d["msg"] and d["type"] for d in detail)
    # The same, OpenAI-style (what OpenAI's SDKs show): every failing field named, with why.
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_request_body")
    first = detail[0]["loc"]
    assert error["param"] == (".".join(map(str, first[1:])) or None)
    for d in detail:
        assert f"{'.'.join(map(str, d['loc'][1:])) or 'body'}: {d['msg']}" in error["message"]
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("content", "headers", "status"),
    [
        (b"{not json", {"content-type": "application/json"}, 422),
        (b"\xff\xfe{}", {"content-type": "application/json"}, 422),
        (b"", {"content-type": "application/json"}, 422),
        (b'{"model": "fake/m", "prompt": "x"}', {"content-type": "text/plain"}, 415),
        (b"x" * (2 << 20), {"content-type": "application/json"}, 413),
    ],
)
def test_malformed_bodies_get_documented_4xx(client, content, headers, status):
    r = client.post("/v5/completions", content=content, headers=headers)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert ("detail" in body) if status == 422 else (body["error"]["message"] and body["error"]["type"])


def test_chunked_body_is_read(client):
    def parts():
        yield b'{"model": "fake/m",'
        yield b' "prompt": "x", "max_tokens": 1}'

    r = client.post("/v5/completions", content=parts(), headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def test_unknown_path_and_method_answer_json(client):
    r = client.get("/v5/nothing")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = client.get("/v5/completions")
    assert r.status_code == 405 and r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [
        ("fail-400", 400, "vendor_rejected"),
        ("fail-401", 502, "vendor_auth"),
        ("fail-429", 429, "vendor_rate_limited"),
        ("fail-500", 502, "vendor_error"),
        ("garbage", 502, None),
    ],
)
def test_vendor_errors_are_translated_without_leaking_credentials(client, model, status, code):
    for stream in (False, True):
        r = client.post("/v5/completions", json={"model": f"fake/{model}", "prompt": "x", "stream": stream})
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert error["vendor"] == "fake"
        if code:
            assert error["code"] == code
        assert UPSTREAM_SECRET not in r.text
        assert r.headers["x-should-retry"] == ("false" if code in ("vendor_rejected", "vendor_auth") else "true")
        if status == 429:
            assert r.headers["retry-after"] == "30" and r.headers["x-should-retry"] == "true"


@pytest.mark.parametrize("model", ["cut-stream", "bad-sse"])
def test_stream_failure_after_start_is_an_error_event_then_done(client, model):
    r = client.post("/v5/completions", json={"model": f"fake/{model}", "prompt": "x", "stream": True})
    assert r.status_code == 200
    events = sse_events(r.text)
    assert events[-1] == {"event": "done", "data": "[DONE]"}
    error = json.loads(events[-2]["data"])["error"]
    assert error["type"] == "vendor_error" and error["vendor"] == "fake"


def test_healthz_and_readyz(gateway, database):
    assert httpx.get(f"{gateway.url}/healthz", verify=SHARED_TLS).json() == {"status": "ok"}
    ready = httpx.get(f"{gateway.url}/readyz", headers={"x-api-key": database.key}, verify=SHARED_TLS).json()
    assert ready == {"status": "ok", "checks": {"fake": "ok", "retrying": "ok", "down": "ok", "database": "ok",
                                                 "limits": "ok"}}


def test_logs_never_hold_keys(client, gateway, database):
    for model in ("fail-400", "fail-401", "fail-500"):
        client.post("/v5/completions", json={"model": f"fake/{model}", "prompt": "x"})
    client.post("/v5/completions", json={"model": "fake/m", "prompt": "x"}, headers={"x-api-key": "sk-wrong-key-123456"})
    log = gateway.log()
    assert "fake failure" in log or "vendor 'fake'" in log  # the failures were logged...
    for secret in (UPSTREAM_SECRET, database.key, "sk-wrong-key-123456"):
        assert secret not in log  # ...without a secret


def test_redaction_filter_scrubs_known_and_key_shaped_secrets():
    import logging

    from gateway.core.redaction import Redactor
    from gateway.http.observe.logs import RedactSecrets

    record = logging.LogRecord("x", logging.INFO, __file__, 1, "calling %s with %s and %s", (
        "https://v/?q", "Authorization: Bearer abc.def", "sk-abcdefghijkl"), None)
    RedactSecrets(Redactor(["topsecret"])).filter(record)
    assert record.getMessage() == "calling https://v/?q with Authorization: [redacted] and [redacted]"
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "key=topsecret", None, None)
    RedactSecrets(Redactor(["topsecret"])).filter(record)
    assert "topsecret" not in record.getMessage()


def test_a_422_names_each_field_as_openai_writes_param_and_says_how_many_it_left_out():
    detail = [{"loc": ["body", "prompt", 2], "msg": "not a string", "type": "type_error"},
              {"loc": ["body", "stream_options", "include_usage"], "msg": "not a boolean", "type": "type_error"},
              {"loc": ["body"], "msg": "JSON decode error", "type": "json_invalid"}]
    detail += [{"loc": ["body", f"x{i}"], "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}
               for i in range(30)]
    error = ValidationFailed(detail).body()["error"]
    assert error["param"] == "prompt[2]"
    assert error["message"].startswith("invalid request: prompt[2]: not a string; "
                                       "stream_options.include_usage: not a boolean; body: JSON decode error; x0: ")
    assert error["message"].endswith("; and 13 more problems (see detail)")
    assert ValidationFailed([{"loc": ["body"], "msg": "Field required", "type": "missing"}]).body()["error"][
        "param"] is None
