"""Chat on the embedded model (the real SmolLM2 through llama.cpp's engine): its chat template,
JSON by constrained decoding, seeds, logprobs, and what it refuses by name."""

from __future__ import annotations

import json

import jsonschema_rs
import openai
import pytest

MODEL = "local/smollm2-135m"
ASK = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a city and its country."}]
CITY = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"], "additionalProperties": False}


@pytest.fixture
def oai(local_gateway, database):
    return openai.OpenAI(api_key=database.key, base_url=f"{local_gateway.url}/v5", max_retries=0, timeout=120)


def test_a_chat_answer_from_the_models_chat_template(oai):
    answer = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=6, temperature=0)
    choice = answer.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert answer.usage.prompt_tokens > 10 and 0 < answer.usage.completion_tokens <= 6


def test_json_schema_is_decoded_to_match(oai):
    answer = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=60, temperature=0, response_format={
        "type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}})
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    assert jsonschema_rs.validator_for(CITY).is_valid(json.loads(choice.message.content))


def test_a_seed_gives_the_same_choices_and_n_differs_by_choice(oai):
    ask = {"model": MODEL, "messages": ASK, "max_tokens": 6, "temperature": 1.0, "seed": 11, "n": 2}
    first, again = oai.chat.completions.create(**ask), oai.chat.completions.create(**ask)
    assert [c.message.content for c in first.choices] == [c.message.content for c in again.choices]
    assert [c.index for c in first.choices] == [0, 1]
    assert first.usage.completion_tokens <= 12  # both choices' tokens, each at most max_tokens


def test_logprobs_and_a_stream_with_usage(oai):
    answer = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=3, temperature=0, logprobs=True,
                                         top_logprobs=2)
    content = answer.choices[0].logprobs.content
    assert len(content) == answer.usage.completion_tokens
    assert all(len(token.top_logprobs) == 2 for token in content)
    chunks = list(oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=3, temperature=0, stream=True,
                                              stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.delta.content or "" for c in chunks for ch in c.choices)
    assert text == answer.choices[0].message.content
    assert [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason] == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3


def test_tools_are_refused_by_name(local):
    answer = local.post("/v5/chat/completions", json={"model": MODEL, "messages": ASK, "tools": [
        {"type": "function", "function": {"name": "f"}}]})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "tools"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_image_part_is_refused_naming_it_and_the_model(local, stream):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [*ASK, {"role": "assistant", "content": "Paris, France."},
                {"role": "user", "content": [{"type": "text", "text": "And this one?"}, image]}]
    answer = local.post("/v5/chat/completions", json={"model": MODEL, "messages": messages, "max_tokens": 2,
                                                      "stream": stream})
    assert answer.status_code == 400, answer.text  # a stream's too: refused before it starts
    error = answer.json()["error"]
    assert (error["param"], error["vendor"], error["code"]) == ("messages[3].content[1]", "local",
                                                                 "unsupported_parameter")
    assert "smollm2-135m" in error["message"] and "image" in error["message"]


@pytest.mark.parametrize("top", [None, 0, 1], ids=["absent", "zero", "one"])
def test_logprobs_give_each_token_its_entry_and_the_alternatives_asked(oai, top):
    """As OpenAI gives them: an entry per token, with `top_logprobs` alternatives (none when absent or 0)."""
    asked = {} if top is None else {"top_logprobs": top}
    answer = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=3, temperature=0, logprobs=True,
                                         **asked)
    content = answer.choices[0].logprobs.content
    assert len(content) == answer.usage.completion_tokens == 3
    assert "".join(token.token for token in content) == answer.choices[0].message.content
    assert all(len(token.top_logprobs) == (top or 0) for token in content)
    chunks = list(oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=3, temperature=0, logprobs=True,
                                              stream=True, **asked))
    streamed = [token for c in chunks for ch in c.choices if ch.logprobs for token in ch.logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in content]
    assert all(len(token.top_logprobs) == (top or 0) for token in streamed)


def test_integers_written_as_floats_are_integers(local):
    """JSON Schema's integers (2.0, 1e0) are the model's integers too: they were a 500."""
    body = b'{"model": "%s", "messages": %s, "n": 2.0, "max_tokens": 2e0, "seed": 7.0, "temperature": 0}' % (
        MODEL.encode(), json.dumps(ASK).encode())
    answer = local.post("/v5/chat/completions", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert [c["index"] for c in answer.json()["choices"]] == [0, 1]
    assert answer.json()["usage"]["completion_tokens"] <= 4
