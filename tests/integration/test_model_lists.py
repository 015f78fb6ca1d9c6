"""GET /v5/models/{model}: one entry of GET /v5/models, by an id that holds a `/`, with the real
openai SDK (which percent-encodes the `/`) and as a raw path, against the session's gateway in front
of the fake OpenAI vendor."""

from __future__ import annotations

import openai
import pytest


@pytest.fixture
def oai(gateway, database):
    return openai.OpenAI(api_key=database.key, base_url=f"{gateway.url}/v5", max_retries=0)


def test_the_openai_sdk_retrieves_each_model_the_list_lists(oai):
    listed = {model.id: model for model in oai.models.list()}
    assert "fake/backup" in listed
    for model_id, entry in listed.items():
        assert oai.models.retrieve(model_id) == entry


def test_a_model_is_retrieved_by_its_plain_path_too(client):
    listed = client.get("/v5/models").json()["data"]
    entry = next(model for model in listed if model["id"] == "fake/backup")
    answer = client.get("/v5/models/fake/backup")
    assert answer.status_code == 200 and answer.json() == entry


@pytest.mark.parametrize("model", ["fake/no-such-model", "nowhere/backup", "backup", "fake"])
def test_a_model_the_list_lacks_is_a_json_404(oai, client, model):
    with pytest.raises(openai.NotFoundError) as raised:
        oai.models.retrieve(model)
    assert raised.value.body["code"] == "model_not_found" and model in raised.value.body["message"]
    answer = client.get(f"/v5/models/{model}")
    assert answer.status_code == 404 and answer.headers["content-type"] == "application/json"
    assert answer.json()["error"]["code"] == "model_not_found"


def test_retrieving_needs_a_key(gateway, client):
    answer = client.get("/v5/models/fake/backup", headers={"x-api-key": ""})
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key"


def test_an_id_longer_than_a_models_is_a_422(client):
    answer = client.get("/v5/models/fake/" + "m" * 300)
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["path", "model"]


def test_another_method_is_a_405_naming_get(client):
    answer = client.post("/v5/models/fake/backup", json={})
    assert answer.status_code == 405 and answer.headers["allow"] == "GET, HEAD"
    assert answer.json()["error"]["type"] == "invalid_request_error"
