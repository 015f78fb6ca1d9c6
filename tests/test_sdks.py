"""The official SDKs against a live gateway: scale-gp-beta (x-api-key + x-selected-account-id,
base URL = server root) and openai (Authorization: Bearer, base URL = .../v5)."""

from __future__ import annotations

import openai
import pytest
import scale_gp_beta
from scale_gp_beta import SGPClient


@pytest.fixture
def sgp(gateway, database):
    return SGPClient(api_key=database.key, account_id="acct-a", base_url=gateway.url, max_retries=0)


@pytest.fixture
def oai(gateway, database):
    return openai.OpenAI(api_key=database.key, base_url=f"{gateway.url}/v5", max_retries=0)


def test_scale_sdk_non_streaming(sgp):
    completion = sgp.completions.create(model="fake/m", prompt=["a", "b"], n=2, max_tokens=2, logprobs=1)
    assert completion.object == "text_completion"
    assert [c.index for c in completion.choices] == [0, 1, 2, 3]
    assert completion.choices[0].text == " w0 w1"
    assert completion.choices[0].logprobs.tokens == [" w0", " w1"]
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens


def test_scale_sdk_streaming_ends_cleanly(sgp):
    stream = sgp.completions.create(model="fake/m", prompt="x", max_tokens=3, stream=True,
                                    stream_options={"include_usage": True})
    chunks = list(stream)  # must not raise at the end of the stream
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == " w0 w1 w2"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3


def test_scale_sdk_errors(gateway, sgp):
    with pytest.raises(scale_gp_beta.UnprocessableEntityError) as info:
        sgp.completions.create(model="fake/m", prompt="x", temperature=9)
    assert info.value.body["detail"][0]["loc"] == ["body", "temperature"]
    bad = SGPClient(api_key="wrong", account_id="acct-a", base_url=gateway.url, max_retries=0)
    with pytest.raises(scale_gp_beta.AuthenticationError):
        bad.completions.create(model="fake/m", prompt="x")


def test_openai_sdk_non_streaming(oai):
    completion = oai.completions.create(model="fake/m", prompt="x", max_tokens=2, echo=True, stop=["zz"])
    assert completion.choices[0].text == "x w0 w1"
    assert completion.choices[0].finish_reason == "length"
    assert completion.model == "fake/m"


def test_openai_sdk_streaming_ends_cleanly(oai):
    stream = oai.completions.create(model="fake/m", prompt=["p", "q"], max_tokens=2, stream=True,
                                    stream_options={"include_usage": True})
    chunks = list(stream)
    texts: dict[int, str] = {}
    for c in chunks:
        for choice in c.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
    assert texts == {0: " w0 w1", 1: " w0 w1"}
    assert chunks[-1].usage.completion_tokens == 4


def test_openai_sdk_stream_error_raises(oai):
    with pytest.raises(openai.APIError):
        list(oai.completions.create(model="fake/cut-stream", prompt="x", stream=True))


def test_openai_sdk_errors(gateway, oai):
    with pytest.raises(openai.UnprocessableEntityError):
        oai.completions.create(model="fake/m", prompt="x", logprobs=9)
    bad = openai.OpenAI(api_key="wrong", base_url=f"{gateway.url}/v5", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model="fake/m", prompt="x")
