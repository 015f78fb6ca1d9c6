"""Model aliases (GATEWAY_ALIASES, `[aliases]`) let clients hard-wired to a bare name call the
gateway: completions and chat with the real SDKs, the model lists, the ledger (the real model), and
allow-lists (the real model's). A bare name that is no alias is a 422 that says how a model is named.
A gateway of its own, in front of the fake OpenAI vendor."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from scale_gp_beta import SGPClient

from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import wait_until
from tests.support.provision import ledger_row, run_cli, sqlite_database

USER = [{"role": "user", "content": "hello there"}]
ALIASES = "gpt-4o=fake/m;backup-model=fake/backup"


@pytest.fixture(scope="module")
def db():
    with sqlite_database() as database:
        yield database


@pytest.fixture(scope="module")
def gateway(upstream, db):
    with GatewayProcess(gateway_env(upstream.url, db.url, GATEWAY_ALIASES=ALIASES)) as process:
        yield process


@pytest.fixture
def oai(gateway, db):
    return openai.OpenAI(api_key=db.key, base_url=f"{gateway.url}/v5", max_retries=0)


@pytest.fixture
def http(gateway, db):
    with httpx.Client(base_url=gateway.url, headers={"x-api-key": db.key}, timeout=30, verify=SHARED_TLS) as client:
        yield client


def _sent_models(upstream, path):
    return [r["body"]["model"] for r in upstream.requests if r["path"] == path]


def test_an_alias_completes_on_its_model_and_the_ledger_records_that_model(oai, db, upstream):
    raw = oai.completions.with_raw_response.create(model="gpt-4o", prompt="hi", max_tokens=2)
    answer = raw.parse()
    assert answer.model == "fake/m" and raw.headers["x-gateway-model"] == "fake/m"
    assert _sent_models(upstream, "/v1/completions") == ["m"]
    row = ledger_row(db.url, "acct-a", raw.headers["x-request-id"])
    assert (row["vendor"], row["model"], row["outcome"], row["fallback_from"]) == ("fake", "fake/m", "completed", None)


def test_an_alias_chats_plain_and_streamed(oai, gateway, db, upstream):
    answer = oai.chat.completions.create(model="gpt-4o", messages=USER, max_tokens=2)
    assert answer.model == "fake/m" and answer.choices[0].message.content == " w0 w1"
    chunks = list(oai.chat.completions.create(model="backup-model", messages=USER, max_tokens=2, stream=True))
    assert {chunk.model for chunk in chunks} == {"fake/backup"}
    assert _sent_models(upstream, "/v1/chat/completions") == ["m", "backup"]
    sgp = SGPClient(api_key=db.key, account_id="acct-a", base_url=gateway.url, max_retries=0)
    assert sgp.chat.completions.create(model="gpt-4o", messages=USER, max_tokens=2).model == "fake/m"


def test_the_model_lists_name_the_aliases(oai, http):
    listed = {model.id: model for model in oai.models.list()}
    alias = listed["gpt-4o"]
    assert (alias.owned_by, alias.alias_for) == ("fake", "fake/m")
    assert "fake/m" in listed and "fake/backup" in listed
    assert oai.models.retrieve("gpt-4o") == alias
    assert oai.models.retrieve("fake/m") == listed["fake/m"]
    items = {f"{m['model_vendor']}/{m['model_name']}": m for m in http.get("/v5/chat/completions/models").json()["items"]}
    assert items["fake/m"]["model_aliases"] == ["gpt-4o"] and items["fake/backup"]["model_aliases"] == ["backup-model"]
    assert "model_aliases" not in items["fake/fail-503"]


@pytest.mark.parametrize("path", ["/v5/completions", "/v5/chat/completions"])
@pytest.mark.parametrize("model", ["gpt-5", "fake/", "/m"])
def test_a_model_without_a_vendor_is_a_422_in_words(http, path, model):
    body = {"model": model, "prompt": "hi"} if path == "/v5/completions" else {"model": model, "messages": USER}
    answer = http.post(path, json=body)
    assert answer.status_code == 422 and answer.headers["x-should-retry"] == "false"
    detail = answer.json()["detail"]
    assert [d["loc"] for d in detail] == [["body", "model"]]
    error = answer.json()["error"]
    assert (error["code"], error["param"], error["type"]) == ("invalid_request_body", "model", "invalid_request_error")
    message = error["message"]
    assert "vendor/name" in message and "e.g. openai/gpt-4o" in message and "^" not in message
    assert "Configured vendors: down, fake, retrying." in message
    assert "Configured aliases: backup-model, gpt-4o." in message


def test_the_openai_sdk_shows_the_422s_message(oai):
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        oai.chat.completions.create(model="gpt-5", messages=USER)
    assert "Configured vendors: down, fake, retrying." in str(raised.value)


def test_an_allow_list_applies_to_the_model_an_alias_stands_for(gateway, db):
    made = json.loads(run_cli(db.url, "keys", "create", "--account", "acct-a", "--models", "fake/backup",
                              "--format", "json"))
    client = openai.OpenAI(api_key=made["key"], base_url=f"{gateway.url}/v5", max_retries=0)

    def refused():
        try:
            client.completions.create(model="gpt-4o", prompt="hi", max_tokens=1)
        except openai.PermissionDeniedError as exc:
            return exc
        return None

    denied = wait_until(refused, message="the key's allow-list")
    assert denied.body["code"] == "model_not_allowed" and "fake/m" in denied.body["message"]
    assert client.completions.create(model="backup-model", prompt="hi", max_tokens=1).model == "fake/backup"
