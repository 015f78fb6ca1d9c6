"""The official SDKs against a live gateway: scale-gp-beta (x-api-key + x-selected-account-id,
base URL = server root) and openai (Authorization: Bearer, base URL = .../v5), in Python, and the
openai SDK in Node (tests/node, installed by `make install` when npm is there)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import openai
import pytest
import scale_gp_beta
from scale_gp_beta import SGPClient

from tests.support.gateway_process import ROOT

NODE_TESTS = ROOT / "tests" / "node"
# Two problems at once: the SDKs must show both, with why.
INVALID = {"model": "fake/m", "prompt": "x", "logprobs": 9, "temperature": 3}


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
    assert info.value.body["detail"][0]["loc"] == ["body", "temperature"]  # the seed's shape, kept
    assert "temperature: 9 is greater than the maximum of 2" in info.value.body["error"]["message"]
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
    with pytest.raises(openai.UnprocessableEntityError) as info:
        oai.completions.create(**INVALID)
    error = info.value
    assert (error.type, error.code, error.param) == ("invalid_request_error", "invalid_request_body", "logprobs")
    assert "logprobs: 9 is greater than the maximum of 5" in str(error)  # the reason, in the exception
    assert "temperature: 3 is greater than the maximum of 2" in str(error)
    assert error.response.headers["x-should-retry"] == "false"
    bad = openai.OpenAI(api_key="wrong", base_url=f"{gateway.url}/v5", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model="fake/m", prompt="x")


@pytest.mark.npm
def test_openai_node_sdk_shows_the_reason_of_a_422(gateway, database):
    """The Node SDK reads only `body.error`: without it, a 422 was "422 status code (no body)"."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(f"the openai Node SDK test needs node and npm on PATH (missing: "
                    f"{', '.join(name for name, path in (('node', node), ('npm', npm)) if path is None)})")
    assert (NODE_TESTS / "node_modules" / "openai").is_dir(), "npm is there, tests/node is not installed: make install"
    done = subprocess.run([node, str(NODE_TESTS / "sdk_errors.mjs"), json.dumps(INVALID)], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "GATEWAY_URL": gateway.url, "GATEWAY_KEY": database.key})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert (seen["raised"], seen["kind"], seen["status"]) == (True, "UnprocessableEntityError", 422)
    assert seen["message"].startswith("422 invalid request: ")
    assert "logprobs: 9 is greater than the maximum of 5" in seen["message"]
    assert "temperature: 3 is greater than the maximum of 2" in seen["message"]
    assert (seen["type"], seen["code"], seen["param"], seen["shouldRetry"]) == (
        "invalid_request_error", "invalid_request_body", "logprobs", "false")
