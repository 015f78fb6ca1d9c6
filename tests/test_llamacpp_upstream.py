"""The `openai` adapter in front of a real third-party OpenAI-compatible server: llama.cpp's own
HTTP server (xllamacpp) with the packaged model."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes.dropping_upstream import DroppingUpstream
from tests.gateway_process import GatewayProcess
from tests.support import LOCAL_TIMEOUT, SHARED_TLS, chunks_of

pytestmark = pytest.mark.slow

MODEL = "llamacpp/smollm2-135m"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def llamacpp(engine, database):
    env = {
        "GATEWAY_DATABASE_URL": database.url,
        "GATEWAY_VENDOR_LLAMACPP_PROTOCOL": "openai",
        "GATEWAY_VENDOR_LLAMACPP_BASE_URL": f"{engine.url}/v1",
        "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
        "GATEWAY_VALIDATE_RESPONSES": "1",
    }
    with GatewayProcess(env) as process, httpx.Client(base_url=process.url, headers={"x-api-key": database.key},
                                                      timeout=LOCAL_TIMEOUT, verify=SHARED_TLS) as client:
        yield client


def stream_text(client: httpx.Client, body: dict) -> tuple[str, dict]:
    r = client.post("/v5/completions", json={"model": MODEL, "stream": True, "stream_options": {"include_usage": True},
                                             **body})
    assert r.status_code == 200, r.text
    chunks = chunks_of(r.text)
    return "".join(c["text"] for chunk in chunks for c in chunk["choices"]), chunks[-1]["usage"]


def test_completion_is_the_servers_own_answer(llamacpp, engine):
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "seed": 3, "stop": ["United"]}
    direct = engine.complete(body)
    r = llamacpp.post("/v5/completions", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["model"] == MODEL
    assert answer["choices"] == [{"index": 0, "text": direct["choices"][0]["text"], "finish_reason": "stop",
                                  "logprobs": None}]
    assert answer["choices"][0]["text"] == " Paris.\n\nThe "
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert [answer["usage"][k] for k in counts] == [direct["usage"][k] for k in counts]


def test_stream_matches_the_completion_and_reports_usage(llamacpp):
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0}
    whole = llamacpp.post("/v5/completions", json={"model": MODEL, **body}).json()
    text, usage = stream_text(llamacpp, body)
    assert text == whole["choices"][0]["text"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (5, 12)


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_a_connection_dropped_before_any_answer_is_retried_once(transport, database):
    """llama.cpp closes its connection after a streamed answer although it announced keep-alive,
    so a pooled connection reused right then dies before answering (about 2% of requests under
    concurrency). The fake drops every reused connection: each request after the first one
    meets a dead connection, and must still be answered."""
    with DroppingUpstream() as upstream:
        env = {
            "GATEWAY_DATABASE_URL": database.url,
            "GATEWAY_VENDOR_DROPPY_PROTOCOL": "openai",
            "GATEWAY_VENDOR_DROPPY_BASE_URL": f"{upstream.url}/v1",
            "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
            "GATEWAY_VENDOR_DROPPY_RETRIES": "0",  # the resend after a drop is not a retry
            "GATEWAY_HTTP_TRANSPORT": transport,
        }
        headers = {"x-api-key": database.key}
        with GatewayProcess(env) as gateway, \
                httpx.Client(base_url=gateway.url, headers=headers, verify=SHARED_TLS) as c:
            for stream in (True, False, True, False):
                r = c.post("/v5/completions", json={"model": "droppy/m", "prompt": "x", "stream": stream})
                assert r.status_code == 200, r.text
                assert " ok" in r.text and '"error"' not in r.text
    # Every request was answered once; some met a dead connection first (with httpx's own pool a
    # stream left before its last chunk is not reused, so fewer do).
    assert upstream.answered == 4 and upstream.dropped >= 1


def test_chat_style_logprobs_of_a_compatible_server_arrive_in_the_legacy_shape(llamacpp):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 6, "temperature": 0, "logprobs": 2}
    whole = llamacpp.post("/v5/completions", json=body).json()["choices"][0]
    lp = whole["logprobs"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert "".join(lp["tokens"]) == whole["text"]
    assert lp["text_offset"] == [len("".join(lp["tokens"][:i])) for i in range(len(lp["tokens"]))]
    # The conversion (gateway/vendors/logprobs.py) keeps each token in its own entry, at its logprob.
    assert all(len(top) <= 2 and top[lp["tokens"][i]] == lp["token_logprobs"][i]
               for i, top in enumerate(lp["top_logprobs"]))
    assert all(value <= 0 for value in lp["token_logprobs"])
    r = llamacpp.post("/v5/completions", json={**body, "stream": True})
    pieces = [c["logprobs"] for chunk in chunks_of(r.text) for c in chunk["choices"] if c.get("logprobs")]
    streamed = {key: [v for piece in pieces for v in piece[key]] for key in lp}
    assert streamed["tokens"] == lp["tokens"] and streamed["text_offset"] == lp["text_offset"]
    assert streamed["token_logprobs"] == pytest.approx(lp["token_logprobs"], abs=1e-4)
