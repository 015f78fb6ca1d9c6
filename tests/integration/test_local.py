"""The embedded `local/` vendor: the real model behind the real gateway, over real HTTP."""

from __future__ import annotations

import itertools
import json
import threading

import httpx
import pytest

from tests.contract.fuzz import short_fuzz
from tests.support.bodies import chunks_of
from tests.support.cli import fresh_account
from tests.support.environments import LOCAL_CONTEXT, LOCAL_MODEL, LOCAL_PARALLEL, LOCAL_TIMEOUT, NO_EOS, SHARED_TLS
from tests.support.gateway_process import ROOT, GatewayProcess
from tests.support.processes import wait_until
from tests.support.provision import create_key, wait_for_rows

pytestmark = pytest.mark.slow

PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": PROMPT}]
# The request examples of the contract, which the docs page (Swagger UI) offers and fills in.
EXAMPLES = json.loads((ROOT / "openapi.json").read_text())["paths"]["/v5/completions"]["post"]["requestBody"][
    "content"]["application/json"]["examples"]


def complete(client: httpx.Client, **body) -> dict:
    r = client.post("/v5/completions", json={"model": LOCAL_MODEL, **body})
    assert r.status_code == 200, r.text
    return r.json()


def streamed(client: httpx.Client, **body) -> tuple[dict[int, str], dict[int, str], dict | None, list[dict]]:
    """A stream's text and finish reason per choice index, its usage chunk, and its chunks."""
    r = client.post("/v5/completions", json={"model": LOCAL_MODEL, "stream": True,
                                             "stream_options": {"include_usage": True}, **body})
    assert r.status_code == 200, r.text
    return summary(chunks_of(r.text))


def summary(chunks: list[dict]) -> tuple[dict[int, str], dict[int, str], dict | None, list[dict]]:
    """Text and (single) finish reason per choice index, the usage chunk, and the chunks."""
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
            if choice["finish_reason"]:
                assert choice["index"] not in finishes
                finishes[choice["index"]] = choice["finish_reason"]
    usage = chunks[-1].get("usage")
    return texts, finishes, usage, chunks


def test_same_seed_same_text_streamed_or_not(local):
    body = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 1, "seed": 1234, "logit_bias": NO_EOS}
    first = complete(local, **body)["choices"][0]["text"]
    assert complete(local, **body)["choices"][0]["text"] == first
    texts, _, _, _ = streamed(local, **body)
    assert texts == {0: first}
    assert complete(local, **body | {"seed": 1235})["choices"][0]["text"] != first


def test_seeds_beyond_the_engines_range_are_deterministic(local):
    for seed in (-(2**63), 2**63 - 1, 2**32 - 1):
        body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1, "seed": seed}
        assert complete(local, **body)["choices"][0]["text"] == complete(local, **body)["choices"][0]["text"]


def test_stream_equals_non_stream_at_temperature_0(local):
    body = {"prompt": PROMPT, "max_tokens": 20, "temperature": 0, "seed": 7, "logprobs": 2}
    whole = complete(local, **body)
    texts, finishes, usage, chunks = streamed(local, **body)
    choice = whole["choices"][0]
    assert texts == {0: choice["text"]} and finishes == {0: choice["finish_reason"]}
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert [usage[k] for k in counts] == [whole["usage"][k] for k in counts]
    pieces = [c["choices"][0]["logprobs"] for c in chunks if c["choices"] and c["choices"][0].get("logprobs")]
    assert [t for p in pieces for t in p["tokens"]] == choice["logprobs"]["tokens"]
    assert [o for p in pieces for o in p["text_offset"]] == choice["logprobs"]["text_offset"]
    streamed_logprobs = [lp for p in pieces for lp in p["token_logprobs"]]
    assert streamed_logprobs == pytest.approx(choice["logprobs"]["token_logprobs"], abs=1e-3)


def test_logprobs_shape_and_bounds(local):
    choice = complete(local, prompt=PROMPT, max_tokens=10, temperature=0, logprobs=3, logit_bias=NO_EOS)["choices"][0]
    lp = choice["logprobs"]
    n = len(lp["tokens"])
    assert n == 10 and len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n
    assert "".join(lp["tokens"]) == choice["text"]
    for i in range(n):
        assert choice["text"][lp["text_offset"][i]:].startswith(lp["tokens"][i])
        top = lp["top_logprobs"][i]
        assert 1 <= len(top) <= 3
        assert all(v <= 0 for v in top.values()) and lp["token_logprobs"][i] <= 0
        # Greedy: the chosen token is the likeliest one.
        assert lp["token_logprobs"][i] == pytest.approx(max(top.values()))
        assert max(top, key=top.get) == lp["tokens"][i]
    none = complete(local, prompt=PROMPT, max_tokens=3, temperature=0, logprobs=0)["choices"][0]["logprobs"]
    # logprobs 0: the chosen token alone, as OpenAI gives it.
    assert len(none["tokens"]) == 3
    assert none["top_logprobs"] == [{t: lp} for t, lp in zip(none["tokens"], none["token_logprobs"], strict=True)]
    assert complete(local, prompt=PROMPT, max_tokens=3)["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("stream", [False, True])
def test_top_logprobs_always_hold_the_sampled_token(local, stream):
    """Sampling at temperature 2 picks tokens outside the top one: each is still in its
    top_logprobs, with its own logprob (logprobs + 1 entries then), as OpenAI gives it."""
    body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 2, "seed": 5, "logprobs": 1, "logit_bias": NO_EOS}
    if stream:
        chunks = streamed(local, **body)[3]
        pieces = [c["logprobs"] for chunk in chunks for c in chunk["choices"] if c["logprobs"]]
    else:
        pieces = [complete(local, **body)["choices"][0]["logprobs"]]
    entries = [(t, lp, top) for p in pieces
               for t, lp, top in zip(p["tokens"], p["token_logprobs"], p["top_logprobs"], strict=True)]
    assert len(entries) == 24
    assert all(top[token] == logprob and len(top) <= 2 for token, logprob, top in entries)
    assert any(len(top) == 2 and max(top, key=top.get) != token for token, _, top in entries)  # not greedy there


@pytest.mark.parametrize("prompt", [PROMPT, "Hello は"])  # は is split over two tokens
def test_echo_logprobs_score_the_prompt_exactly(local, engine, prompt):
    ids = engine.tokenize(prompt)
    answer = complete(local, prompt=prompt, max_tokens=0, echo=True, logprobs=2)
    choice = answer["choices"][0]
    assert choice["text"] == prompt and choice["finish_reason"] == "length"
    assert answer["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 0, "total_tokens": len(ids)}
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(ids)
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    for i in range(1, len(ids)):
        assert lp["token_logprobs"][i] == pytest.approx(engine.next_token_logprob(ids[:i], ids[i]), abs=1e-3)
        assert 1 <= len(lp["top_logprobs"][i]) <= 3  # the 2 likeliest, and the prompt's own token
        assert lp["top_logprobs"][i][lp["tokens"][i]] == lp["token_logprobs"][i]
    assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"])
    if prompt == "Hello は":
        assert lp["tokens"] == ["Hello", "bytes:\\x20\\xe3\\x81", "bytes:\\xaf"]
        assert lp["text_offset"] == [0, 5, 6]


def test_echo_with_one_token_is_how_harnesses_score(local):
    prompt_only = complete(local, prompt=PROMPT, max_tokens=0, echo=True, logprobs=1)["choices"][0]["logprobs"]
    answer = complete(local, prompt=PROMPT, max_tokens=1, echo=True, logprobs=1, temperature=0)
    choice = answer["choices"][0]
    lp = choice["logprobs"]
    assert choice["text"] == PROMPT + " Paris"
    assert lp["tokens"] == prompt_only["tokens"] + [" Paris"]
    assert lp["text_offset"][-1] == len(PROMPT)
    assert lp["token_logprobs"][:-1] == pytest.approx(prompt_only["token_logprobs"], abs=1e-3)
    # The generated token is greedy: its logprob is the top one, as harnesses check.
    assert lp["token_logprobs"][-1] == pytest.approx(max(lp["top_logprobs"][-1].values()))
    assert answer["usage"]["prompt_tokens"] == 5 and answer["usage"]["completion_tokens"] == 1


def test_echo_without_logprobs_and_in_streams(local):
    choice = complete(local, prompt=PROMPT, max_tokens=2, echo=True, temperature=0)["choices"][0]
    assert choice["text"] == PROMPT + " Paris."
    texts, finishes, usage, _ = streamed(local, prompt=PROMPT, max_tokens=2, echo=True, temperature=0)
    assert texts == {0: PROMPT + " Paris."} and finishes == {0: "length"}
    texts, finishes, usage, _ = streamed(local, prompt=PROMPT, max_tokens=0, echo=True)
    assert texts == {0: PROMPT} and finishes == {0: "length"}
    assert usage["completion_tokens"] == 0 and usage["prompt_tokens"] == 5


def test_max_tokens_0_generates_nothing(local):
    answer = complete(local, prompt=PROMPT, max_tokens=0, n=2)
    assert [c["text"] for c in answer["choices"]] == ["", ""]
    assert {c["finish_reason"] for c in answer["choices"]} == {"length"}
    assert answer["usage"] == {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}


@pytest.mark.parametrize(("stop", "text"), [(".", " Paris"), (["ris", "zzz"], " Pa"), ("\n\n", " Paris.")])
def test_stop_text_is_not_included(local, stop, text):
    full = complete(local, prompt=PROMPT, max_tokens=8, temperature=0)["choices"][0]["text"]
    assert full.startswith(" Paris.\n\n")
    choice = complete(local, prompt=PROMPT, max_tokens=8, temperature=0, stop=stop)["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == (text, "stop")
    texts, finishes, _, _ = streamed(local, prompt=PROMPT, max_tokens=8, temperature=0, stop=stop)
    assert (texts, finishes) == ({0: text}, {0: "stop"})


def test_n_and_list_prompts_are_indexed_prompt_major_with_seed_plus_i(local, engine):
    prompts = ["Once upon a time", "The weather today"]
    body = {"max_tokens": 5, "temperature": 1, "seed": 42, "logit_bias": NO_EOS}
    answer = complete(local, prompt=prompts, n=2, **body)
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2, 3]
    for p, prompt in enumerate(prompts):
        for i in range(2):
            alone = complete(local, prompt=prompt, **body | {"seed": 42 + i})["choices"][0]["text"]
            assert answer["choices"][p * 2 + i]["text"] == alone
    prompt_tokens = sum(len(engine.tokenize(p)) for p in prompts)  # each prompt once, whatever n is
    assert answer["usage"]["prompt_tokens"] == prompt_tokens
    assert answer["usage"]["completion_tokens"] == 4 * 5
    texts, finishes, usage, _ = streamed(local, prompt=prompts, n=2, **body)
    assert texts == {c["index"]: c["text"] for c in answer["choices"]}
    assert finishes == {i: "length" for i in range(4)}
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (prompt_tokens, 20)


def test_best_of_returns_the_candidates_with_the_highest_cumulative_logprob(local):
    body = {"prompt": "My favourite food is", "max_tokens": 6, "temperature": 1, "logit_bias": NO_EOS}
    candidates = []
    for j in range(4):
        choice = complete(local, **body, seed=10 + j, logprobs=0)["choices"][0]
        candidates.append((sum(choice["logprobs"]["token_logprobs"]), choice["text"]))
    best = [text for _, text in sorted(candidates, key=lambda c: c[0], reverse=True)[:2]]
    answer = complete(local, **body, seed=10, n=2, best_of=4)
    assert [c["text"] for c in answer["choices"]] == best
    assert all(c["logprobs"] is None for c in answer["choices"])
    assert answer["usage"]["completion_tokens"] == 4 * 6  # every candidate was generated


def test_the_empty_prompt_generates_from_the_start_of_text_token(local, engine):
    """As OpenAI: "" is the start of a new document. SmolLM2's start-of-text token is <|im_start|>."""
    body = {"prompt": "", "max_tokens": 6, "temperature": 0, "logit_bias": NO_EOS}
    answer = complete(local, **body)
    text = answer["choices"][0]["text"]
    usage = answer["usage"]
    assert text and (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (1, 6, 7)
    (start,) = engine.tokenize("<|im_start|>")
    assert text == engine.complete({"prompt": [start], "max_tokens": 6, "temperature": 0,
                                    "logit_bias": NO_EOS})["choices"][0]["text"]
    texts, finishes, usage, _ = streamed(local, **body)
    assert texts == {0: text} and finishes == {0: "length"} and usage["prompt_tokens"] == 1
    listed = complete(local, **body | {"prompt": ["fine", ""]})
    assert listed["choices"][1]["text"] == text
    # Echoed with logprobs, the empty prompt has no tokens of its own.
    scored = complete(local, prompt="", max_tokens=0, echo=True, logprobs=1)
    assert scored["choices"][0]["text"] == "" and scored["usage"]["prompt_tokens"] == 1
    assert scored["choices"][0]["logprobs"] == {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                                "text_offset": []}


def test_usage_is_the_engines_exact_count(local, engine):
    prompt = "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"
    answer = complete(local, prompt=prompt, max_tokens=7, logit_bias=NO_EOS, temperature=0)
    assert answer["usage"]["prompt_tokens"] == len(engine.tokenize(prompt))
    assert answer["usage"]["completion_tokens"] == 7 and answer["choices"][0]["finish_reason"] == "length"
    stopped = complete(local, prompt=prompt, max_tokens=64, temperature=0)
    assert stopped["choices"][0]["finish_reason"] == "stop"  # the model's end-of-turn token
    assert 0 < stopped["usage"]["completion_tokens"] < 64


def test_sampling_parameters_are_honoured(local, engine):
    greedy = complete(local, prompt=PROMPT, max_tokens=8, temperature=0)["choices"][0]["text"]
    # top_p keeps only the likeliest token, whatever the temperature.
    assert complete(local, prompt=PROMPT, max_tokens=8, temperature=2, top_p=0, seed=3)["choices"][0]["text"] == greedy
    hot = {complete(local, prompt=PROMPT, max_tokens=8, temperature=2, seed=s)["choices"][0]["text"] for s in (1, 2)}
    assert greedy not in hot
    # Penalties count the text so far, prompt included: " mat" is penalised away.
    repeat = "The cat sat on the mat. The cat sat on the"
    assert complete(local, prompt=repeat, max_tokens=2, temperature=0)["choices"][0]["text"].startswith(" mat")
    for penalty in ({"presence_penalty": 2}, {"frequency_penalty": 2}):
        text = complete(local, prompt=repeat, max_tokens=2, temperature=0, **penalty)["choices"][0]["text"]
        assert not text.startswith(" mat")
    # logit_bias keys are token ids: +100 forces a token, -100 bans one.
    (comma,) = engine.tokenize(",")
    forced = complete(local, prompt=PROMPT, max_tokens=3, temperature=0, logit_bias={str(comma): 100})
    assert forced["choices"][0]["text"] == ",,,"
    (paris,) = engine.tokenize(" Paris")
    assert greedy.startswith(" Paris")
    banned = complete(local, prompt=PROMPT, max_tokens=1, temperature=0, logit_bias={str(paris): -100})
    assert not banned["choices"][0]["text"].startswith(" Paris")
    # user has no effect on a local model, and is accepted.
    assert complete(local, prompt=PROMPT, max_tokens=8, temperature=0, user="u-1")["choices"][0]["text"] == greedy


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({"suffix": "!"}, 400, "suffix", "unsupported_parameter"),
        ({"logit_bias": {"49152": 5}}, 400, "logit_bias", "invalid_value"),
        ({"max_tokens": LOCAL_CONTEXT + 1}, 400, "max_tokens", "invalid_value"),
        ({"prompt": "word " * LOCAL_CONTEXT}, 400, "prompt", "context_length_exceeded"),
        ({"prompt": "word " * LOCAL_CONTEXT, "echo": True, "logprobs": 1}, 400, "prompt", "context_length_exceeded"),
        ({"model": "local/gpt-4"}, 404, "model", "unknown_model"),
    ],
)
def test_bad_requests_are_4xx_naming_parameter_and_vendor(local, body, status, param, code):
    for stream in (False, True):
        r = local.post("/v5/completions", json={"model": LOCAL_MODEL, "prompt": PROMPT, "stream": stream, **body})
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert (error["param"], error["vendor"], error["code"]) == (param, "local", code)
        assert param in error["message"]
    if code == "unknown_model":
        assert "smollm2-135m" in error["message"]


def test_a_model_the_embedded_vendor_lacks_writes_no_row_as_an_unknown_vendor_writes_none(local_gateway, database):
    """Neither reached a vendor: both are refused as the request is planned, and neither is a ledger
    row or a request in the report (docs/usage.md). The row of a request served after them is the
    account's only one: the writer commits rows in the order they came."""
    account = fresh_account()
    key = create_key(database.url, account)
    with httpx.Client(base_url=local_gateway.url, headers={"x-api-key": key}, timeout=LOCAL_TIMEOUT,
                      verify=SHARED_TLS) as client:
        for model, code in (("local/gpt-4", "unknown_model"), ("nowhere/gpt-4", "unknown_vendor")):
            for path, body in (("/v5/completions", {"prompt": PROMPT}), ("/v5/chat/completions", {"messages": CHAT})):
                for stream in (False, True):
                    r = client.post(path, json={"model": model, "max_tokens": 1, "stream": stream, **body})
                    assert r.status_code == 404 and r.json()["error"]["code"] == code, r.text
        served = client.post("/v5/completions", json={"model": LOCAL_MODEL, "prompt": PROMPT, "max_tokens": 1})
        assert served.status_code == 200, served.text
        (row,) = wait_for_rows(database.url, account, 1)
        assert row["request_id"] == served.headers["x-request-id"]
        report = client.get("/v5/usage", params={"group_by": "outcome"}).json()["data"]
        assert [(line["outcome"], line["requests"]) for line in report] == [("completed", 1)]


def test_concurrent_requests_finish_while_the_event_loop_stays_responsive(local_gateway, database):
    """Twice as many streams as the model has slots, while /healthz is polled. Every stream's
    tokens arrive one by one over its generation; a blocked event loop would hold the polls for
    the length of a generation, so none would be answered between a stream's first token and its
    last. Events are ordered by a shared counter, not timed."""
    streams, tokens = 2 * LOCAL_PARALLEL, 32
    order = itertools.count()
    polls: list[int] = []  # when each /healthz answer came
    spans: dict[int, tuple[int, int]] = {}  # per stream: when its first and its last token came
    results: dict[int, tuple[dict, dict | None]] = {}

    def run(i: int) -> None:
        body = {"model": LOCAL_MODEL, "prompt": f"Story number {i}:", "max_tokens": tokens, "temperature": 1,
                "seed": i, "logit_bias": NO_EOS, "stream": True, "stream_options": {"include_usage": True}}
        lines, arrivals = [], []
        with httpx.Client(base_url=local_gateway.url, headers={"x-api-key": database.key}, timeout=LOCAL_TIMEOUT,
                          verify=SHARED_TLS) as c, \
                c.stream("POST", "/v5/completions", json=body) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                lines.append(line)
                if line.startswith("data: {") and json.loads(line[6:])["choices"]:
                    arrivals.append(next(order))
        spans[i] = (arrivals[0], arrivals[-1])
        _, finishes, usage, _ = summary(chunks_of("\n".join(lines) + "\n"))
        results[i] = (finishes, usage)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(streams)]
    with httpx.Client(base_url=local_gateway.url, verify=SHARED_TLS) as poll:
        poll.get("/healthz")
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                assert poll.get("/healthz").status_code == 200
                polls.append(next(order))
                t.join(0.02)  # the streams' end, or time for the next poll
    assert sorted(results) == list(range(streams))
    for finishes, usage in results.values():
        assert finishes == {0: "length"} and usage["completion_tokens"] == tokens
    for first, last in spans.values():
        assert any(first < poll_at < last for poll_at in polls), (first, last)


def test_a_client_that_leaves_frees_its_slot(local, local_gateway, database):
    """Both slots busy with long generations (1000 tokens, longer than the test): one stream read
    to its end, one left after its first chunk. The next request must get the slot of the one
    that left, and be answered while the other is still generating, instead of waiting for a
    generation to end."""
    body = {"model": LOCAL_MODEL, "prompt": "Count to a million: 1, 2,", "max_tokens": 1000, "temperature": 1,
            "stream": True, "logit_bias": NO_EOS}
    assert LOCAL_PARALLEL == 2
    headers = {"x-api-key": database.key}
    kept_open = threading.Event()  # the reader of the kept stream has its first chunk
    finished = threading.Event()  # the kept stream ended
    stop_reading = threading.Event()

    def keep_reading() -> None:
        with httpx.Client(base_url=local_gateway.url, headers=headers, timeout=LOCAL_TIMEOUT, verify=SHARED_TLS) as c, \
                c.stream("POST", "/v5/completions", json=body) as r:
            for line in r.iter_lines():
                kept_open.set()
                if stop_reading.is_set():
                    return  # leaves: the connection closes
                if line.startswith("data: {") and any(c["finish_reason"] for c in json.loads(line[6:])["choices"]):
                    finished.set()

    reader = threading.Thread(target=keep_reading)
    reader.start()
    try:
        assert kept_open.wait(LOCAL_TIMEOUT)
        with httpx.Client(base_url=local_gateway.url, headers=headers, timeout=LOCAL_TIMEOUT, verify=SHARED_TLS) as c, \
                c.stream("POST", "/v5/completions", json=body) as r:
            assert r.status_code == 200
            assert next(r.iter_lines()).startswith("data: ")
        # The stream was not read to the end: leaving the block closed the connection.
        answer = complete(local, prompt=PROMPT, max_tokens=4, temperature=0)
        assert not finished.is_set()  # answered while the kept stream still generates
        assert answer["usage"]["completion_tokens"] == 4
    finally:
        stop_reading.set()
        reader.join(LOCAL_TIMEOUT)


def test_official_sdks_stream_and_end_cleanly(local_gateway, database):
    import openai
    from scale_gp_beta import SGPClient

    oai = openai.OpenAI(base_url=f"{local_gateway.url}/v5", api_key=database.key, max_retries=0)
    texts = [c.choices[0].text for c in oai.completions.create(model=LOCAL_MODEL, prompt=PROMPT, max_tokens=4,
                                                              temperature=0, stream=True) if c.choices]
    assert "".join(texts) == " Paris.\n\n"
    sgp = SGPClient(api_key=database.key, account_id="acct-a", base_url=local_gateway.url, max_retries=0)
    texts = [c.choices[0].text for c in sgp.completions.create(model=LOCAL_MODEL, prompt=PROMPT, max_tokens=4,
                                                               temperature=0, stream=True) if c.choices]
    assert "".join(texts) == " Paris.\n\n"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_contracts_request_examples_are_answered_by_the_embedded_model(local, name):
    """What the docs page offers a new user works against `make serve` as it is."""
    body = EXAMPLES[name]["value"]
    r = local.post("/v5/completions", json=body)
    assert r.status_code == 200, r.text
    if body.get("stream"):
        texts, _, usage, _ = summary(chunks_of(r.text))
        assert usage is not None
    else:
        texts = {choice["index"]: choice["text"] for choice in r.json()["choices"]}
    assert sorted(texts) == list(range(body.get("n", 1))) and all(texts.values())


def test_readyz_reports_the_loaded_model(local_gateway, database):
    ready = httpx.get(f"{local_gateway.url}/readyz", headers={"x-api-key": database.key}, verify=SHARED_TLS).json()
    assert ready == {"status": "ok", "checks": {"local": "ok", "database": "ok", "limits": "ok"}}
    assert "model 'smollm2-135m'" in local_gateway.log() and "loaded and warmed up in" in local_gateway.log()


def test_a_model_that_does_not_load_is_reported_not_ready(tmp_path, database):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a model")
    env = {"GATEWAY_DATABASE_URL": database.url, "GATEWAY_VENDOR_LOCAL_MODEL_PATH": str(bogus)}
    with GatewayProcess(env, ready_path="/healthz") as gateway:
        def loaded_or_failed() -> dict | None:
            ready = httpx.get(f"{gateway.url}/readyz", headers={"x-api-key": database.key}, verify=SHARED_TLS).json()
            return None if "loading" in ready["checks"]["local"] else ready

        ready = wait_until(loaded_or_failed, message="the model to load or fail")
        assert ready["status"] == "starting" and "cannot load model" in ready["checks"]["local"]
        r = httpx.post(f"{gateway.url}/v5/completions", headers={"x-api-key": database.key},
                       json={"model": "local/bogus", "prompt": "x"}, verify=SHARED_TLS)
        assert r.status_code == 503 and r.json()["error"]["vendor"] == "local"
        assert "cannot load model" in r.json()["error"]["message"]


def test_cut_streams_are_estimated_with_the_models_own_tokenizer(engine):
    """The ledger counts a cut stream's text with the adapter's tokenizer when it has one."""
    import asyncio

    from gateway.core.config import Settings, VendorConfig
    from gateway.store.tokens import counter
    from gateway.vendors import registry

    async def count(text: str) -> int:
        vendor = VendorConfig(name="local", protocol="local", options={"context_size": "256", "parallel": "1"})
        adapter = registry.build(vendor, Settings())
        await adapter.start()
        while adapter.not_ready():
            await asyncio.sleep(0.02)
        try:
            own = counter("local/smollm2-135m", lambda t: adapter.count_tokens("smollm2-135m", t))
            return await asyncio.to_thread(own, text)
        finally:
            await adapter.close()

    generated = engine.complete({"prompt": "The capital of France is", "max_tokens": 7, "temperature": 0})
    text = generated["choices"][0]["text"]
    assert len(text) > 7  # several characters per token: a character count would not pass
    assert asyncio.run(count(text)) == generated["usage"]["completion_tokens"] == 7


def test_fuzz_finds_nothing(local_gateway, database):
    """Schemathesis (all checks, and tests/contract/fuzz_hooks.py's: every 400 of a valid request must be a
    parameter the capability map says the model cannot serve) against the real model, with short
    generations."""
    outcome = short_fuzz("local", local_gateway.url, database.key)
    assert outcome.returncode == 0, outcome.summary()
    assert outcome.calls["positive 200"] > 0 and outcome.calls["chat positive 200"] > 0, outcome.summary()
