"""A request's lifecycle (gateway/http/lifecycle.py): whatever ends a request, and wherever, it
gives back its admission slot and its limits' slot and writes exactly one ledger row. A plain
answer's lifecycle ends after the answer is sent, or failed to be."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway import services
from gateway.http.lifecycle import _Answer, header_value
from gateway.endpoints.completions import unit
from gateway.http import serving
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.fakes.server import free_port
from tests.support.processes import served_in_process
from tests.support.provision import ledger_row, ledger_rows, new_key, run_cli, sqlite_database

SCOPE = {"type": "http", "method": "POST", "path": "/v5/completions", "headers": []}


def test_a_plain_answer_ends_after_its_head_and_body_went_out():
    seen: list[str] = []

    async def send(message: dict) -> None:
        seen.append(message["type"])

    answer = _Answer(b'{"id":"cmpl-1"}', {"x-request-id": "cmpl-1"}, then=lambda: seen.append("ended"))
    asyncio.run(answer(SCOPE, None, send))
    assert seen == ["http.response.start", "http.response.body", "ended"]


def test_a_plain_answer_ends_when_it_could_not_be_sent():
    ended: list[bool] = []

    async def send(message: dict) -> None:
        raise OSError("the client's connection is gone")

    answer = _Answer(b'{"id":"cmpl-1"}', {}, then=lambda: ended.append(True))
    with pytest.raises(OSError):
        asyncio.run(answer(SCOPE, None, send))
    assert ended == [True]


def test_what_a_header_cannot_carry_is_percent_encoded():
    assert header_value("fake/gpt-4o") == "fake/gpt-4o"
    assert header_value("v2/ok€") == "v2/ok%E2%82%AC"
    assert header_value("a\x00b\x7fc") == "a%00b%7Fc"
    assert header_value("50%/x") == "50%25/x"  # so that an encoded value is never ambiguous
    assert header_value("a b") == "a b"


@pytest.fixture(scope="module")
def in_process(upstream):
    """The gateway in this process (so a test can make it fail where it wants), one request at a
    time (GATEWAY_MAX_CONCURRENT=1), and a key allowed one request in flight, on a database of its
    own (a limit in the session's would stop the other tests' gateways of several workers)."""
    with sqlite_database() as database:
        settings = services.load_settings(gateway_env(upstream.url, database.url, GATEWAY_PORT=str(free_port()),
                                                      GATEWAY_MAX_CONCURRENT="1"))
        key, key_id, account = new_key(database.url)
        run_cli(database.url, "limits", "set", "--key", key_id, "--concurrent", "1")
        with served_in_process(services.create_app(settings), settings) as url, \
                httpx.Client(base_url=url, headers={"x-api-key": key}, timeout=30, verify=SHARED_TLS) as client:
            yield client, account, database.url


def assert_everything_given_back(client: httpx.Client) -> None:
    """Admission (one request at a time) and the key's concurrency slot are free again."""
    for stream in (False, True):
        r = client.post("/v5/completions", json={"model": "fake/m", "prompt": "next", "max_tokens": 2,
                                                 "stream": stream})
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_name_a_header_cannot_carry_is_answered_and_billed(in_process, stream):
    client, account, url = in_process
    r = client.post("/v5/completions", json={"model": "fake/ok€\x7f", "prompt": "x", "max_tokens": 2,
                                             "stream": stream})
    assert r.status_code == 200, r.text
    assert r.headers["x-gateway-model"] == "fake/ok%E2%82%AC%7F"
    row = ledger_row(url, account, r.headers["x-request-id"])
    assert (row["outcome"], row["model"]) == ("completed", "fake/ok€\x7f")
    assert_everything_given_back(client)


@pytest.mark.parametrize("stream", [False, True])
def test_a_failure_while_shaping_the_answer_writes_one_row_and_gives_everything_back(in_process, monkeypatch,
                                                                                     upstream, stream):
    client, account, url = in_process

    def broken(*args, **kwargs):
        raise RuntimeError("a bug while shaping the answer")

    if stream:
        monkeypatch.setattr(serving, "EventStream", broken)
    else:
        monkeypatch.setattr(unit.Completions, "body", broken)
    r = client.post("/v5/completions", json={"model": "fake/m", "prompt": "x", "max_tokens": 2, "stream": stream})
    monkeypatch.undo()
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error", r.text
    row = ledger_row(url, account, r.headers["x-request-id"])
    assert (row["outcome"], row["cost_nanos"]) == ("gateway_error", 0)  # the client got nothing
    assert [other for other in ledger_rows(url, account) if other["request_id"] == row["request_id"]] == [row]
    assert upstream.open_streams == 0  # the vendor's stream it had begun was let go
    assert_everything_given_back(client)


@pytest.mark.parametrize(("model", "status"), [
    ("fake/fail-400", 400),  # the vendor refused the request
    ("nowhere/m", 404),  # no such vendor
    ("fake/fail-500", 502),
    ("retrying/stall", 504),  # streamed: the vendor sent its headers, then nothing
])  # fmt: skip
def test_an_error_answer_carries_the_request_id_of_its_ledger_row(client, database, model, status):
    r = client.post("/v5/completions", json={"model": model, "prompt": "x", "max_tokens": 2,
                                             "stream": model.endswith("stall")})
    assert r.status_code == status, r.text
    request_id = r.headers["x-request-id"]
    if status != 404:  # no vendor was called for an unknown one: nothing to record
        assert ledger_row(database.url, "acct-a", request_id)["request_id"] == request_id
