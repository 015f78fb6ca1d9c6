"""The SDKs' chat through every protocol that serves it over HTTP: the openai Node SDK's
`chat.completions.create` and scale-gp-beta's, plain and streamed (the fake OpenAI-compatible, Anthropic and Gemini servers behind one gateway:
vendors `fake`, `anthropic`, `gemini`)."""

from __future__ import annotations

import pytest
from scale_gp_beta import SGPClient

from tests.support.chat import USER
from tests.support.node_sdk import run_script

MODELS = ["fake/m", "anthropic/claude-x", "gemini/gem-x"]


@pytest.mark.npm
@pytest.mark.parametrize("model", MODELS)
def test_plain_chat(vendors_gateway, database, vclient, model):
    completion = run_script("sdk_chat.mjs", {"model": model, "messages": USER, "max_tokens": 3},
                            vendors_gateway.url, database.key)["completion"]
    assert completion["object"] == "chat.completion" and completion["model"] == model
    (choice,) = completion["choices"]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"] == " w0 w1 w2"
    assert choice["finish_reason"] == "length" and completion["usage"]["completion_tokens"] == 3


@pytest.mark.npm
@pytest.mark.parametrize("model", MODELS)
def test_streamed_chat_with_usage(vendors_gateway, database, vclient, model):
    chunks = run_script("sdk_chat.mjs", {"model": model, "messages": USER, "max_tokens": 3, "stream": True,
                                         "stream_options": {"include_usage": True}},
                        vendors_gateway.url, database.key)["chunks"]
    pieces = [choice for chunk in chunks[:-1] for choice in chunk["choices"]]
    assert pieces[0]["delta"]["role"] == "assistant"
    assert "".join(p["delta"].get("content") or "" for p in pieces) == " w0 w1 w2"
    assert [p["finish_reason"] for p in pieces if p["finish_reason"]] == ["length"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize("model", MODELS)
def test_the_scale_sdk_chats(vendors_gateway, vclient, database, model):
    sgp = SGPClient(api_key=database.key, account_id="acct-a", base_url=vendors_gateway.url, max_retries=0)
    answer = sgp.chat.completions.create(model=model, messages=USER, max_tokens=2)
    assert answer.choices[0].message.content == " w0 w1"
    chunks = list(sgp.chat.completions.create(model=model, messages=USER, max_tokens=2, stream=True))
    assert "".join(ch.delta.content or "" for c in chunks for ch in c.choices) == " w0 w1"
