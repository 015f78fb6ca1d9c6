"""A client set up with another base URL asks for paths the API lacks (`/v1/...`, `/chat/completions`,
`/v5/v5/...`): its 404 names the path under /v5 it meant and how to set the base URL, with the real
SDKs against the session's gateway. Any other unknown path is a plain JSON 404."""

from __future__ import annotations

import httpx
import openai
import pytest
import scale_gp_beta
from scale_gp_beta import SGPClient

from tests.support.environments import SHARED_TLS

USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("base", ["", "/v1"])
def test_the_openai_sdk_without_v5_is_told_the_path_it_meant(gateway, database, base):
    client = openai.OpenAI(api_key=database.key, base_url=f"{gateway.url}{base}", max_retries=0)
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="fake/m", messages=USER)
    message = raised.value.body["message"]
    assert "did you mean /v5/chat/completions?" in message and "/v5" in message.split("?", 1)[1]
    with pytest.raises(openai.NotFoundError) as raised:
        client.completions.create(model="fake/m", prompt="hi")
    assert "did you mean /v5/completions?" in raised.value.body["message"]


def test_scale_gp_beta_given_v5_is_told_the_path_it_meant(gateway, database):
    client = SGPClient(api_key=database.key, account_id="acct-a", base_url=f"{gateway.url}/v5", max_retries=0)
    with pytest.raises(scale_gp_beta.NotFoundError) as raised:
        client.completions.create(model="fake/m", prompt="hi", max_tokens=1)
    assert "did you mean /v5/completions?" in raised.value.body["error"]["message"]


@pytest.mark.parametrize("path, meant", [
    ("/v1/models", "/v5/models"),
    ("/models", "/v5/models"),
    ("/v1/models/fake/backup", "/v5/models/fake/backup"),
    ("/openai/v1/chat/completions", "/v5/chat/completions"),
    ("/v1/completions", "/v5/completions"),
])
def test_a_path_the_api_has_under_v5_is_named(gateway, path, meant):
    with httpx.Client(base_url=gateway.url, verify=SHARED_TLS) as http:
        answer = http.get(path)
    assert answer.status_code == 404 and answer.headers["content-type"] == "application/json"
    assert f"'{path}': did you mean {meant}?" in answer.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/nothing-here", "/v1/embeddings", "/v5/nothing"])
def test_any_other_unknown_path_is_a_json_404_without_a_guess(gateway, path):
    with httpx.Client(base_url=gateway.url, verify=SHARED_TLS) as http:
        answer = http.post(path, json={})
    assert answer.status_code == 404 and answer.headers["content-type"] == "application/json"
    error = answer.json()["error"]
    assert error["type"] == "not_found_error" and "did you mean" not in error["message"]
