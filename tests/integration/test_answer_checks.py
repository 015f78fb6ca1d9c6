"""A vendor's answer is held to what it was asked natively (gateway/planner/verify.py): fewer
choices than asked, an ignored echo, missing logprobs are the vendor's failure, never a success;
a usage below what the answer shows is raised to it. The fake vendor's `ignores-*` models answer
as servers that ignore a parameter do."""

from __future__ import annotations

import pytest

from gateway.core.completion import Choice, Chunk, CompletionCall, Result, Usage
from gateway.core.errors import VendorFailed
from gateway.planner.verify import Expected
from tests.support.bodies import chunks_of, streamed


def expected(**call) -> Expected:
    return Expected(CompletionCall(model="m", **{"prompts": ["Hello world"], **call}), "v")


def test_fewer_choices_than_asked_are_the_vendors_failure():
    with pytest.raises(VendorFailed, match="answered 1 of the 2 choices asked for"):
        expected(n=2).result(Result([Choice(0, " a")]))
    with pytest.raises(VendorFailed, match="answered 1 of the 2 choices"):  # the same index twice
        expected(n=2).result(Result([Choice(0, " a"), Choice(0, " b")]))
    check = expected(prompts=["p", "q"])
    check.batch([Chunk([Choice(1, " a", "stop")])])
    with pytest.raises(VendorFailed, match="answered 1 of the 2 choices"):
        check.ended()


def test_an_echo_is_checked_as_it_arrives_in_pieces():
    check = expected(echo=True)
    check.batch([Chunk([Choice(0, "Hel")]), Chunk([Choice(0, "lo w")])])
    check.batch([Chunk([Choice(0, "orld of"), Choice(0, " the future")])])
    check.ended()
    wrong = expected(echo=True)
    wrong.batch([Chunk([Choice(0, "Hel")])])
    with pytest.raises(VendorFailed, match="did not echo the prompt"):
        wrong.batch([Chunk([Choice(0, "p me")])])
    short = expected(echo=True)
    short.batch([Chunk([Choice(0, "Hello")])])
    with pytest.raises(VendorFailed, match="did not echo the prompt"):
        short.ended()  # the stream ended within the prompt
    assert expected(echo=True, prompts=[""]).result(Result([Choice(0, " a")]))  # an empty prompt echoes nothing


def test_logprobs_asked_for_must_come_with_every_piece_of_text():
    with pytest.raises(VendorFailed, match="returned no logprobs"):
        expected(logprobs=0).result(Result([Choice(0, " a")]))
    with pytest.raises(VendorFailed, match="returned no logprobs"):
        expected(logprobs=2).batch([Chunk([Choice(0, " a")])])
    expected(logprobs=2).batch([Chunk([Choice(0, "", "stop")])])  # a finish without text needs none


def test_a_usage_below_what_the_answer_shows_is_raised_and_marked_estimated():
    lp = {"tokens": [" a", " b", " c"], "token_logprobs": [-1, -1, -1], "top_logprobs": [None] * 3,
          "text_offset": [0, 2, 4]}
    result = Result([Choice(0, " a b c", logprobs=lp), Choice(1, " a b c", logprobs=lp)], Usage(2, 3))
    checked = expected(n=2, logprobs=0).result(result)
    assert (checked.usage.completion_tokens, checked.usage.estimated) == (6, True)
    fine = expected(n=2).result(Result([Choice(0, " a"), Choice(1, "")], Usage(2, 1)))
    assert (fine.usage.completion_tokens, fine.usage.estimated) == (1, False)  # one choice has text
    echoed = {**lp, "text_offset": [0, 5, 7]}  # the prompt "Hello" is the first token
    assert expected(echo=True, prompts=["Hello"], logprobs=0).result(
        Result([Choice(0, "Hello b c", logprobs=echoed)], Usage(1, 2))).usage.completion_tokens == 2


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("model", "body"), [
    ("ignores-n", {"n": 2}),
    ("ignores-prompt", {"prompt": ["p", "q"]}),
    ("ignores-echo", {"echo": True}),
    ("ignores-logprobs", {"logprobs": 2}),
])  # fmt: skip
def test_a_vendor_that_ignored_a_parameter_fails_as_the_vendors(client, model, body, stream):
    r = client.post("/v5/completions", json={"prompt": "Say it", "max_tokens": 2, **body, "model": f"fake/{model}",
                                             "stream": stream})
    if r.status_code == 502:  # found before the answer began
        error = r.json()["error"]
    else:  # a stream that had begun: its error event ends it
        assert stream and r.status_code == 200, r.text
        error = chunks_of(r.text)[-1]["error"]
    assert (error["type"], error["code"], error["vendor"]) == ("vendor_error", "vendor_incomplete", "fake"), error


def test_a_usage_of_one_task_is_raised_to_the_tokens_the_answer_shows(client):
    r = client.post("/v5/completions", json={"model": "fake/one-task-usage", "prompt": "x", "n": 2, "max_tokens": 3,
                                             "logprobs": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 6 and r.json()["usage"]["estimated"] is True
    assert r.headers["x-gateway-usage-estimated"] == "true"


def test_no_stream_chunk_carries_two_entries_of_one_choice(client):
    r = client.post("/v5/completions", json={"model": "fake/m", "prompt": ["p", "q"], "n": 2, "max_tokens": 3,
                                             "echo": True, "stream": True})
    texts, _, chunks = streamed(r.text)
    assert texts == {i: f"{'pq'[i // 2]} w0 w1 w2" for i in range(4)}
    for chunk in chunks:
        indexes = [choice["index"] for choice in chunk["choices"]]
        assert len(indexes) == len(set(indexes)), chunk
