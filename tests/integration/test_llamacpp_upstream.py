"""The `openai` adapter in front of a real third-party OpenAI-compatible server: llama.cpp's own
HTTP server (xllamacpp) with the packaged model, over the gateway's own HTTP client.

Every case is compared with what llama.cpp itself answers and counts, task by task (one prompt,
one choice, called directly): the texts, the usage the client is told (each prompt once, every
choice's tokens: OpenAI's semantics) and the ledger's row (every call's prompt). The gateway is
reached two ways: through the `OPENAI_BASE_URL` shortcut, where it learns which server it is from
the server itself, and as a vendor configured as docs/vendors.md once advised for llama.cpp
(`lacks = ["echo", "best_of"]`)."""

from __future__ import annotations

import math

import httpx
import pytest

from tests.support.bodies import chunks_of, streamed
from tests.support.environments import LOCAL_TIMEOUT, SHARED_TLS
from tests.support.fakes.dropping_upstream import DroppingUpstream
from tests.support.fakes.server import free_port
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import ledger_row

pytestmark = pytest.mark.slow

PROMPT = "The capital of France is"
PROMPTS = ["Hello world", "The sky is"]
CONFIGURATIONS = {
    "shortcut": ("openai", {"OPENAI_API_KEY": "sk-unused", "OPENAI_BASE_URL": "{url}/v1"}),
    "configured": ("llamacpp", {"GATEWAY_VENDOR_LLAMACPP_PROTOCOL": "openai",
                                "GATEWAY_VENDOR_LLAMACPP_BASE_URL": "{url}/v1",
                                "GATEWAY_VENDOR_LLAMACPP_LACKS": "echo,best_of"}),
}


class Through:
    """The gateway in front of llama.cpp, configured one way, and its ledger."""

    def __init__(self, client: httpx.Client, vendor: str, database) -> None:
        self.client = client
        self.model = f"{vendor}/smollm2-135m"
        self.database = database

    def post(self, body: dict) -> httpx.Response:
        return self.client.post("/v5/completions", json={"model": self.model, **body})

    def row(self, request_id: str) -> dict:
        return ledger_row(self.database.url, "acct-a", request_id)


@pytest.fixture(scope="module", params=list(CONFIGURATIONS))
def through(request, engine, database):
    vendor, env = CONFIGURATIONS[request.param]
    env = {name: value.format(url=engine.url) for name, value in env.items()}
    env |= {"GATEWAY_DATABASE_URL": database.url, "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
            "GATEWAY_VALIDATE_RESPONSES": "1"}
    with GatewayProcess(env) as process, httpx.Client(base_url=process.url, headers={"x-api-key": database.key},
                                                      timeout=LOCAL_TIMEOUT, verify=SHARED_TLS) as client:
        yield Through(client, vendor, database)


def tasks(engine, body: dict) -> list[dict]:
    """llama.cpp's own answers to the request's tasks, one call each (prompt-major, choice i with
    seed + i, as the gateway fans them out)."""
    prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
    per_prompt = body.get("best_of") or body.get("n", 1)
    single = {k: v for k, v in body.items() if k not in ("prompt", "n", "best_of", "echo", "stream", "stream_options")}
    if body.get("best_of"):
        single["logprobs"] = max(single.get("logprobs") or 0, 1)
    answers = []
    for prompt in prompts:
        for i in range(per_prompt):
            seed = {"seed": body["seed"] + i} if "seed" in body else {}
            answers.append(engine.over_http({**single, "prompt": prompt, **seed}))
    return answers


def counts(answers: list[dict], per_prompt: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(prompt, completion) tokens the client is told (each prompt once) and the ledger bills."""
    completion = sum(a["usage"]["completion_tokens"] for a in answers)
    told = sum(a["usage"]["prompt_tokens"] for a in answers[::per_prompt])
    billed = sum(a["usage"]["prompt_tokens"] for a in answers)
    return (told, completion), (billed, completion)


def usage_of(body: dict) -> tuple[int, int]:
    return body["usage"]["prompt_tokens"], body["usage"]["completion_tokens"]


def row_counts(row: dict) -> tuple[int, int]:
    assert row["outcome"] == "completed" and row["estimated"] is False, row
    return row["prompt_tokens"], row["completion_tokens"]


@pytest.mark.parametrize("body", [
    {"prompt": PROMPT, "max_tokens": 4, "n": 2},
    {"prompt": PROMPTS, "max_tokens": 3},
    {"prompt": PROMPTS, "max_tokens": 3, "n": 2},
    {"prompt": PROMPT, "max_tokens": 12, "seed": 3, "stop": ["United"]},
    {"prompt": PROMPT, "max_tokens": 6, "temperature": 0.9, "seed": 42, "n": 2},
])  # fmt: skip
def test_choices_and_usage_are_llamacpps_own_summed_over_its_tasks(through, engine, body):
    body = {"temperature": 0, **body}
    per_prompt = body.get("n", 1)
    direct = tasks(engine, body)
    r = through.post(body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert [c["text"] for c in answer["choices"]] == [d["choices"][0]["text"] for d in direct]
    assert [c["index"] for c in answer["choices"]] == list(range(len(direct)))
    told, billed = counts(direct, per_prompt)
    assert usage_of(answer) == told
    assert row_counts(through.row(answer["id"])) == billed


@pytest.mark.parametrize("body", [
    {"prompt": PROMPT, "max_tokens": 4, "n": 2},
    {"prompt": PROMPTS, "max_tokens": 3, "n": 2},
    {"prompt": PROMPT, "max_tokens": 5, "echo": True},
    {"prompt": PROMPTS, "max_tokens": 3, "echo": True, "n": 2},
])  # fmt: skip
def test_a_stream_carries_every_token_once_per_choice_and_the_whole_usage(through, engine, body):
    body = {"temperature": 0, **body}
    per_prompt = body.get("n", 1)
    prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
    direct = tasks(engine, body)
    r = through.post({**body, "stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200, r.text
    texts, finishes, chunks = streamed(r.text)
    echoed = [prompts[i // per_prompt] if body.get("echo") else "" for i in range(len(direct))]
    assert texts == {i: echoed[i] + d["choices"][0]["text"] for i, d in enumerate(direct)}
    assert all(len(f) == 1 for f in finishes.values()) and len(finishes) == len(direct)
    for chunk in chunks:  # clients read chunk.choices[0]: one entry per choice in a chunk
        indexes = [c["index"] for c in chunk["choices"]]
        assert len(indexes) == len(set(indexes)), chunk
    told, billed = counts(direct, per_prompt)
    assert usage_of(chunks[-1]) == told
    assert row_counts(through.row(chunks[0]["id"])) == billed


def test_echo_is_the_prompt_then_llamacpps_completion(through, engine):
    body = {"prompt": PROMPT, "max_tokens": 5, "temperature": 0}
    (direct,) = tasks(engine, body)
    r = through.post({**body, "echo": True})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == PROMPT + direct["choices"][0]["text"]
    assert usage_of(r.json()) == (direct["usage"]["prompt_tokens"], direct["usage"]["completion_tokens"])
    # What llama.cpp cannot do it is not asked for: scoring the prompt's tokens.
    r = through.post({**body, "echo": True, "logprobs": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "echo", r.text


def test_suffix_is_refused_naming_it_since_llamacpp_ignores_it(through):
    r = through.post({"prompt": PROMPT, "suffix": " and that is all.", "max_tokens": 3})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("unsupported_parameter", "suffix")
    assert "llama.cpp" in error["message"]


@pytest.mark.parametrize("logprobs", [0, 1, 2, 5])
def test_logprobs_are_returned_for_every_value_asked(through, engine, logprobs):
    body = {"prompt": PROMPT, "max_tokens": 4, "temperature": 0}
    (direct,) = tasks(engine, {**body, "logprobs": max(logprobs, 1)})
    r = through.post({**body, "logprobs": logprobs})
    assert r.status_code == 200, r.text
    (choice,) = r.json()["choices"]
    lp = choice["logprobs"]
    assert lp is not None and "".join(lp["tokens"]) == choice["text"] == direct["choices"][0]["text"]
    for token, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
        assert top[token] == value and len(top) <= logprobs + 1  # the token itself, and at most `logprobs` more
        if logprobs == 0:
            assert top == {token: value}
    assert usage_of(r.json()) == (direct["usage"]["prompt_tokens"], direct["usage"]["completion_tokens"])


def test_best_of_ranks_llamacpps_candidates_by_their_logprobs(through, engine):
    body = {"prompt": PROMPT, "max_tokens": 5, "temperature": 1.0, "seed": 7, "best_of": 3}
    direct = tasks(engine, body)
    r = through.post(body)
    assert r.status_code == 200, r.text

    def score(answer: dict) -> float:
        return math.fsum(entry["logprob"] for entry in answer["choices"][0]["logprobs"]["content"])

    best = max(direct, key=score)
    assert [c["text"] for c in r.json()["choices"]] == [best["choices"][0]["text"]]
    told, billed = counts(direct, 3)  # every candidate was generated, and is counted
    assert usage_of(r.json()) == told
    assert row_counts(through.row(r.json()["id"])) == billed


@pytest.mark.parametrize("stream", [False, True])
def test_max_tokens_zero_answers_no_text_and_counts_what_llamacpp_generated(through, engine, stream):
    body = {"prompt": PROMPT, "max_tokens": 0, "temperature": 0}
    (direct,) = tasks(engine, body)  # llama.cpp generates one token for 0
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    r = through.post({**body, **extra})
    assert r.status_code == 200, r.text
    if stream:
        texts, finishes, chunks = streamed(r.text)
        answer, request_id = chunks[-1], chunks[0]["id"]
    else:
        answer, request_id = r.json(), r.json()["id"]
        texts = {c["index"]: c["text"] for c in answer["choices"]}
        finishes = {c["index"]: [c["finish_reason"]] for c in answer["choices"]}
    assert texts == {0: ""} and finishes == {0: ["length"]}
    generated = (direct["usage"]["prompt_tokens"], direct["usage"]["completion_tokens"])
    assert generated[1] == 1
    assert usage_of(answer) == generated and row_counts(through.row(request_id)) == generated


def test_completion_is_the_servers_own_answer(through, engine):
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "seed": 3, "stop": ["United"]}
    direct = engine.complete(body)
    r = through.post(body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["model"] == through.model
    assert answer["choices"] == [{"index": 0, "text": direct["choices"][0]["text"], "finish_reason": "stop",
                                  "logprobs": None}]
    assert answer["choices"][0]["text"] == " Paris.\n\nThe "


def test_chat_style_logprobs_of_a_compatible_server_arrive_in_the_legacy_shape(through):
    body = {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "logprobs": 2}
    whole = through.post(body).json()["choices"][0]
    lp = whole["logprobs"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert "".join(lp["tokens"]) == whole["text"]
    assert lp["text_offset"] == [len("".join(lp["tokens"][:i])) for i in range(len(lp["tokens"]))]
    # The conversion (gateway/vendors/logprobs.py) keeps each token in its own entry, at its logprob.
    assert all(len(top) <= 3 and top[lp["tokens"][i]] == lp["token_logprobs"][i]
               for i, top in enumerate(lp["top_logprobs"]))
    assert all(value <= 0 for value in lp["token_logprobs"])
    r = through.post({**body, "stream": True})
    pieces = [c["logprobs"] for chunk in chunks_of(r.text) for c in chunk["choices"] if c.get("logprobs")]
    streamed_lp = {key: [v for piece in pieces for v in piece[key]] for key in lp}
    assert streamed_lp["tokens"] == lp["tokens"] and streamed_lp["text_offset"] == lp["text_offset"]
    assert streamed_lp["token_logprobs"] == pytest.approx(lp["token_logprobs"], abs=1e-4)


@pytest.mark.parametrize("top", [None, 0, 2], ids=["absent", "zero", "two"])
def test_chat_logprobs_are_openais_whatever_llamacpp_gives_for_top_logprobs(through, engine, top):
    """llama.cpp gives alternatives of its own choosing without top_logprobs, and no entries for 0;
    the client gets OpenAI's: an entry per token, `top_logprobs` alternatives each."""
    body = {"model": through.model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 3,
            "temperature": 0, "logprobs": True, **({} if top is None else {"top_logprobs": top})}
    r = through.client.post("/v5/chat/completions", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    content = answer["choices"][0]["logprobs"]["content"]
    assert len(content) == answer["usage"]["completion_tokens"] == 3
    assert all(len(token["top_logprobs"]) == (top or 0) for token in content)
    r = through.client.post("/v5/chat/completions", json={**body, "stream": True})
    streamed_content = [token for chunk in chunks_of(r.text) for c in chunk["choices"] if c.get("logprobs")
                        for token in c["logprobs"]["content"]]
    assert [t["token"] for t in streamed_content] == [t["token"] for t in content]
    assert all(len(token["top_logprobs"]) == (top or 0) for token in streamed_content)


def test_an_unreachable_server_is_named_by_its_vendor_never_by_its_address(database):
    port = free_port()  # nothing listens there
    env = {"GATEWAY_DATABASE_URL": database.url, "GATEWAY_VENDOR_LOCAL_ENABLED": "0", "OPENAI_API_KEY": "sk-unused",
           "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "GATEWAY_VENDOR_OPENAI_RETRIES": "0"}
    with GatewayProcess(env) as gateway, httpx.Client(base_url=gateway.url, headers={"x-api-key": database.key},
                                                      verify=SHARED_TLS) as client:
        for stream in (False, True):
            r = client.post("/v5/completions", json={"model": "openai/m", "prompt": "x", "stream": stream})
            assert r.status_code == 502, r.text
            assert r.json()["error"]["message"] == "cannot talk to vendor 'openai': connection refused"
            assert str(port) not in r.text + str(r.headers)
        assert str(port) in gateway.log()  # the operator's log has the address


def test_a_connection_dropped_before_any_answer_is_retried_once(database):
    """llama.cpp closes its connection after a streamed answer although it announced keep-alive,
    so a pooled connection reused right then dies before answering (about 2% of requests under
    concurrency). The fake drops every reused connection: each request after the first one
    meets a dead connection, and must still be answered, by the gateway's own client."""
    with DroppingUpstream() as upstream:
        env = {
            "GATEWAY_DATABASE_URL": database.url,
            "GATEWAY_VENDOR_DROPPY_PROTOCOL": "openai",
            "GATEWAY_VENDOR_DROPPY_BASE_URL": f"{upstream.url}/v1",
            "GATEWAY_VENDOR_DROPPY_SERVER": "openai",
            "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
            "GATEWAY_VENDOR_DROPPY_RETRIES": "0",  # the resend after a drop is not a retry
        }
        headers = {"x-api-key": database.key}
        with GatewayProcess(env) as gateway, \
                httpx.Client(base_url=gateway.url, headers=headers, verify=SHARED_TLS) as c:
            for stream in (True, False, True, False):
                r = c.post("/v5/completions", json={"model": "droppy/m", "prompt": "x", "stream": stream})
                assert r.status_code == 200, r.text
                assert " ok" in r.text and '"error"' not in r.text
    # Every request was answered once; each after the first met a dead connection first.
    assert upstream.answered == 4 and upstream.dropped >= 1
