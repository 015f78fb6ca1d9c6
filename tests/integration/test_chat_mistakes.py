"""A client's mistakes on chat and completions are a 4xx naming what is wrong, never a 500 and never
accepted and ignored: integers written as floats, an image where it cannot go, the caller's own
OpenAI key in a header, both maximums of tokens at once. Against the gateway in front of the fake
vendors (tests/support/fakes/: each checks the wire shape it is sent), with the real SDKs."""

from __future__ import annotations

import json

import pytest
import scale_gp_beta
from scale_gp_beta import SGPClient

from tests.support.chat import USER

# JSON that validates as integers (JSON Schema counts 2.0 and 1e0 as integers), as schemathesis
# and hand-written clients send them.
CHAT_INTEGERS = [
    b'"n": 2.0, "max_completion_tokens": 3.0',
    b'"n": 2e0, "max_tokens": 3E0, "seed": 7.0',
    b'"n": 1.0, "max_tokens": 30e-1, "logprobs": true, "top_logprobs": 2.0',
]
COMPLETION_INTEGERS = [
    b'"n": 2.0, "max_tokens": 3.0, "logprobs": 1.0',
    b'"n": 2e0, "best_of": 2.0, "max_tokens": 3E0, "seed": 7.0',
]


def _raw(client, path: str, fields: bytes, model: str, stream: bool):
    head = b'{"model": "%s", "messages": %s, ' % (model.encode(), json.dumps(USER).encode()) \
        if path.endswith("chat/completions") else b'{"model": "%s", "prompt": "hi", ' % model.encode()
    tail = b', "stream": true}' if stream else b"}"
    return client.post(path, content=head + fields + tail, headers={"content-type": "application/json"})


def _sent_integers(upstream, path: str) -> dict:
    bodies = [r["body"] for r in upstream.requests if r["path"] == path]
    assert bodies
    return {name: value for body in bodies for name, value in body.items() if isinstance(value, int | float)
            and not isinstance(value, bool)}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("fields", CHAT_INTEGERS)
def test_chat_integers_written_as_floats_are_integers(vclient, upstream, fields, stream):
    answer = _raw(vclient, "/v5/chat/completions", fields, "fake/m", stream)
    assert answer.status_code == 200, answer.text
    asked = json.loads(b"{" + fields + b"}")
    if not stream:
        choices = answer.json()["choices"]
        assert [c["index"] for c in choices] == list(range(int(asked["n"])))
        assert all(len(c["message"]["content"].split()) == 3 for c in choices)
    sent = _sent_integers(upstream, "/v1/chat/completions")
    assert all(type(sent[name]) is int and sent[name] == asked[name] for name in asked if name != "logprobs"), sent


@pytest.mark.parametrize("fields", COMPLETION_INTEGERS)
def test_completion_integers_written_as_floats_are_integers(vclient, upstream, fields):
    answer = _raw(vclient, "/v5/completions", fields, "fake/m", stream=False)
    assert answer.status_code == 200, answer.text
    asked = json.loads(b"{" + fields + b"}")
    assert len(answer.json()["choices"]) == asked["n"]
    sent = _sent_integers(upstream, "/v1/completions")
    assert sent and all(type(value) is int for value in sent.values()), sent


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("model", ["fake/m", "gemini/gem-x", "anthropic/claude-x"])
def test_max_tokens_with_max_completion_tokens_is_refused_naming_both(vclient, upstream, gemini_upstream,
                                                                      anthropic_upstream, model, stream):
    answer = vclient.post("/v5/chat/completions", json={"model": model, "messages": USER, "max_tokens": 3,
                                                         "max_completion_tokens": 5, "stream": stream})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "invalid_parameter_combination",
                                                              "max_tokens")
    assert "'max_tokens' and 'max_completion_tokens'" in error["message"]
    assert not upstream.requests and not gemini_upstream.requests and not anthropic_upstream.requests
    for alone in ({"max_tokens": 3, "max_completion_tokens": None}, {"max_tokens": None, "max_completion_tokens": 3}):
        answer = vclient.post("/v5/chat/completions", json={"model": model, "messages": USER, **alone})
        assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_the_callers_openai_key_as_scale_gp_beta_sends_it_is_refused(vendors_gateway, vclient, upstream, database,
                                                                     stream):
    sgp = SGPClient(api_key=database.key, account_id="acct-a", base_url=vendors_gateway.url, max_retries=0)
    with pytest.raises(scale_gp_beta.BadRequestError) as refused:
        answer = sgp.chat.completions.create(model="fake/m", messages=USER, max_tokens=2, stream=stream,
                                             x_openai_api_key="sk-callers-own")
        list(answer) if stream else answer
    assert refused.value.request.headers["x-openai-api-key"] == "sk-callers-own"  # the SDK's way: a header
    error = refused.value.body["error"]
    assert (error["code"], error["param"]) == ("unsupported_parameter", "x-openai-api-key")
    assert "header 'x-openai-api-key'" in error["message"] and "sk-callers-own" not in error["message"]
    assert not upstream.requests  # nothing served
    assert "x-request-id" not in refused.value.response.headers  # nor a ledger row made: nothing billed


@pytest.mark.parametrize("path, body", [
    ("/v5/completions", {"model": "fake/m", "prompt": "hi", "max_tokens": 2}),
    ("/v5/chat/completions", {"model": "gemini/gem-x", "messages": USER, "max_tokens": 2}),
])
def test_the_callers_openai_key_header_is_refused_on_every_inference_endpoint(vclient, upstream, gemini_upstream,
                                                                              path, body):
    answer = vclient.post(path, json=body, headers={"X-OpenAI-API-Key": "sk-callers-own"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "x-openai-api-key"
    assert not upstream.requests and not gemini_upstream.requests


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("model", ["fake/m", "gemini/gem-x", "anthropic/claude-x"])
@pytest.mark.parametrize("url, why", [
    ("data:image/png;base64,iVBORw0KGgo=@", "not valid base64"),
    ("data:image/png;base64,iVBORw0KGgo", "not valid base64"),  # (its padding cut)
    ("data:image/png;base64,", "holds no data"),
    ("data:image/png,iVBORw0KGgo=", "is not one"),
])
def test_an_image_whose_data_url_is_not_base64_is_a_400_on_every_vendor(vclient, upstream, gemini_upstream,
                                                                        anthropic_upstream, model, url, why, stream):
    image = {"type": "image_url", "image_url": {"url": url}}
    messages = [*USER, {"role": "assistant", "content": "hi"},
                {"role": "user", "content": [{"type": "text", "text": "this?"}, image]}]
    answer = vclient.post("/v5/chat/completions", json={"model": model, "messages": messages, "max_tokens": 2,
                                                         "stream": stream})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_image", "messages[2].content[1].image_url")
    assert why in error["message"]
    assert not upstream.requests and not gemini_upstream.requests and not anthropic_upstream.requests
