"""The gateway's emulations: stop matching (unit, then over HTTP), echo, n and list prompts by
fan-out, best_of ranking. Over HTTP they run against the fake OpenAI-compatible server configured
as `bare` (it lacks everything the gateway can emulate) and `fewstops` (one stop sequence a call)."""

from __future__ import annotations

import math

import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.parameters import EMULATED
from gateway.planner.emulation import StopMatcher
from tests.support.bodies import streamed
from tests.support.environments import VENDORS, capabilities_of
from tests.support.processes import wait_until
from tests.support.provision import ledger_row


def stream_through(matcher: StopMatcher, pieces: list[str]) -> str:
    out = ""
    for piece in pieces:
        out += matcher.feed(piece, None)[0]
        if matcher.stopped:
            return out
    return out + matcher.flush()[0]


def reference_cut(text: str, stops: list[str]) -> tuple[str, bool]:
    """Generation seen one character at a time: stop as soon as a stop sequence is complete."""
    for end in range(1, len(text) + 1):
        for stop in sorted(stops, key=len, reverse=True):
            if text[:end].endswith(stop):
                return text[: end - len(stop)], True
    return text, False


def test_a_stop_split_across_chunks_is_found_wherever_it_is_split():
    text = " w0 w1 w2 w3"
    for cut in range(len(text) + 1):
        for second in range(cut, len(text) + 1):
            matcher = StopMatcher(["1 w2"])
            assert stream_through(matcher, [text[:cut], text[cut:second], text[second:]]) == " w0 w"
            assert matcher.stopped


def test_only_the_possible_stop_prefix_is_held_back():
    matcher = StopMatcher(["w3 w", "zz"])
    assert matcher.feed(" w0 w1 w2 w3", None) == (" w0 w1 w2 ", None)
    assert matcher.flush() == ("w3", None)  # the text ended: the prefix was no stop
    assert not matcher.stopped


def test_the_stop_complete_first_wins():
    assert StopMatcher(["abc", "b"]).cut("xabc", None) == ("xa", None)
    assert StopMatcher(["bc", "abc"]).cut("xabc", None) == ("x", None)  # same end: the longer one


@given(
    text=st.text(alphabet="ab ", max_size=12),
    stops=st.lists(st.text(alphabet="ab ", min_size=1, max_size=3), min_size=1, max_size=3),
    splits=st.lists(st.integers(min_value=0, max_value=12), max_size=4),
)
def test_streamed_cut_equals_generation_one_character_at_a_time(text, stops, splits):
    bounds = [0, *sorted(min(s, len(text)) for s in splits), len(text)]
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    expected, stopped = reference_cut(text, stops)
    matcher = StopMatcher(stops)
    assert stream_through(matcher, pieces) == expected
    assert matcher.stopped == stopped


def test_logprobs_stay_consistent_with_the_cut_text():
    logprobs = {"tokens": [" w0", " w1", " w2"], "token_logprobs": [-0.1, -0.2, -0.3],
                "top_logprobs": [{" w0": -0.1}, {" w1": -0.2}, {" w2": -0.3}], "text_offset": [0, 3, 6]}
    text, kept = StopMatcher(["1 w2"]).cut(" w0 w1 w2", logprobs)
    assert text == " w0 w"
    assert kept == {"tokens": [" w0", " w"], "token_logprobs": [-0.1, -0.2],
                    "top_logprobs": [{" w0": -0.1}, {" w1": -0.2, " w": -0.2}], "text_offset": [0, 3]}


def test_with_logprobs_whole_tokens_are_held_back():
    matcher = StopMatcher(["1 w"])
    lp = {"tokens": [" w0", " w1"], "token_logprobs": [-0.1, -0.2], "top_logprobs": [{}, {}], "text_offset": [0, 3]}
    assert matcher.feed(" w0 w1", lp) == (" w0", {"tokens": [" w0"], "token_logprobs": [-0.1], "top_logprobs": [{}],
                                                  "text_offset": [0]})
    text, rest = matcher.feed(" w2", {"tokens": [" w2"], "token_logprobs": [-0.3], "top_logprobs": [{}],
                                      "text_offset": [6]})
    assert (text, rest["tokens"], rest["text_offset"]) == (" w", [" w"], [3]) and matcher.stopped


def test_the_vendors_echo_of_the_prompt_is_never_matched():
    assert StopMatcher(["ab"], skip=4).cut("xaby ab!", None) == ("xaby ", None)


# -- over HTTP -------------------------------------------------------------------------------------


def test_stream_stop_split_across_chunks_ends_the_vendor_call_with_estimated_usage(vclient, upstream):
    r = vclient.post("/v5/completions", json={"model": "bare/m", "prompt": "x", "stop": ["1 w2", "zz"],
                                              "max_tokens": 8, "stream": True,
                                              "stream_options": {"include_usage": True}})
    texts, finishes, chunks = streamed(r.text)
    assert texts == {0: " w0 w"} and finishes == {0: ["stop"]}
    assert "stop" not in upstream.requests[0]["body"]  # matched by the gateway
    # Ended after " w2" arrived: usage is estimated from 1 prompt and 9 generated characters.
    assert chunks[-1]["usage"] == {"prompt_tokens": 1, "completion_tokens": math.ceil(9 / 4), "total_tokens": 4,
                                   "estimated": True}


def test_stream_stop_prefix_at_the_very_end_is_released(vclient):
    r = vclient.post("/v5/completions", json={"model": "bare/m", "prompt": "x", "stop": "w3 w", "max_tokens": 4,
                                              "stream": True, "stream_options": {"include_usage": True}})
    texts, finishes, chunks = streamed(r.text)
    assert texts == {0: " w0 w1 w2 w3"} and finishes == {0: ["length"]}
    assert chunks[-1]["usage"]["completion_tokens"] == 4  # the vendor's own count


def test_the_vendor_call_ends_as_soon_as_every_choice_has_stopped(vclient, upstream):
    r = vclient.post("/v5/completions", json={"model": "bare/slow-100", "prompt": "x", "stop": " w1",
                                              "max_tokens": 40, "stream": True})
    assert streamed(r.text)[0] == {0: " w0"}
    (vendor_stream,) = upstream.streams
    wait_until(lambda: vendor_stream.ended, message="the vendor stream to end")
    # The gateway hung up once the stop matched, long before the vendor's last token.
    assert vendor_stream.client_left and vendor_stream.sent < vendor_stream.events


def test_non_streamed_stop_cuts_text_and_logprobs(vclient):
    r = vclient.post("/v5/completions", json={"model": "bare/m", "prompt": "x", "stop": "1 w2", "max_tokens": 5,
                                              "logprobs": 1})
    (choice,) = r.json()["choices"]
    assert (choice["text"], choice["finish_reason"]) == (" w0 w", "stop")
    assert choice["logprobs"]["tokens"] == [" w0", " w"] and choice["logprobs"]["text_offset"] == [0, 3]
    assert r.json()["usage"]["completion_tokens"] == 5  # the vendor generated (and billed) them all


@pytest.mark.parametrize("stream", [False, True])
def test_n_times_list_prompts_fan_out_prompt_major_with_each_prompt_counted_once(vclient, upstream, stream):
    body = {"model": "bare/m", "prompt": ["a", "b b"], "n": 3, "max_tokens": 2, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    r = vclient.post("/v5/completions", json=body)
    assert r.status_code == 200, r.text
    assert len(upstream.requests) == 6
    assert all("n" not in req["body"] and isinstance(req["body"]["prompt"], str) for req in upstream.requests)
    if stream:
        texts, finishes, chunks = streamed(r.text)
        assert texts == {i: " w0 w1" for i in range(6)} and finishes == {i: ["length"] for i in range(6)}
        usage = chunks[-1]["usage"]
    else:
        assert [c["index"] for c in r.json()["choices"]] == list(range(6))
        usage = r.json()["usage"]
    # Six vendor calls, but the client is told each prompt once, as OpenAI counts (the fake: a token a word).
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (1 + 2, 6 * 2)


def test_seeds_of_fanned_out_choices_are_seed_plus_i(vclient, upstream):
    vclient.post("/v5/completions", json={"model": "bare/m", "prompt": "x", "n": 3, "seed": 7, "max_tokens": 1})
    assert sorted(req["body"]["seed"] for req in upstream.requests) == [7, 8, 9]


@pytest.mark.parametrize("stream", [False, True])
def test_echo_prepends_the_prompt(vclient, upstream, stream):
    r = vclient.post("/v5/completions", json={"model": "bare/m", "prompt": ["p", "q"], "echo": True,
                                              "max_tokens": 2, "stream": stream})
    assert all("echo" not in req["body"] for req in upstream.requests)
    if not stream:
        assert [c["text"] for c in r.json()["choices"]] == ["p w0 w1", "q w0 w1"]
        return
    texts, _, chunks = streamed(r.text)
    assert texts == {0: "p w0 w1", 1: "q w0 w1"}
    firsts = {}
    for chunk in chunks:
        indexes = [choice["index"] for choice in chunk["choices"]]
        assert len(indexes) == len(set(indexes)), chunk  # clients read one entry per choice
        for choice in chunk["choices"]:
            firsts.setdefault(choice["index"], choice["text"])
    assert firsts == {0: "p w0", 1: "q w0"}  # the echo comes first, with the choice's first piece


ECHO_EMULATED = [name for name in VENDORS if capabilities_of(name)["echo"].kind == EMULATED]


@pytest.mark.parametrize("vendor", ECHO_EMULATED)
def test_an_emulated_echo_reads_whole_in_the_openai_sdks_stream_loop(vendors_gateway, database, vendor):
    """The SDK's README loop reads `chunk.choices[0].text`: the echo and the first token must not
    be two entries of one choice in one chunk (it read "Hello world the" for "Hello world of the")."""
    client = openai.OpenAI(api_key=database.key, base_url=f"{vendors_gateway.url}/v5", max_retries=0)
    body = {"model": f"{vendor}/m", "prompt": "Hello world", "max_tokens": 3, "echo": True}
    whole = client.completions.create(**body).choices[0].text
    assert whole.startswith("Hello world") and len(whole) > len("Hello world")
    text = ""
    for chunk in client.completions.create(**body, stream=True):
        text += chunk.choices[0].text if chunk.choices else ""
    assert text == whole


def test_echo_with_logprobs_needs_a_vendor_that_scores_prompts(vclient, upstream):
    r = vclient.post("/v5/completions", json={"model": "bare/m", "prompt": "p", "echo": True, "logprobs": 1})
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["param"], error["vendor"], error["code"]) == ("echo", "bare", "unsupported_parameter")
    assert "score the prompt" in error["message"] and upstream.requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_more_stops_than_the_vendor_takes_are_matched_after_its_echo(vclient, upstream, stream):
    r = vclient.post("/v5/completions", json={"model": "fewstops/m", "prompt": "w1 here", "echo": True,
                                              "stop": ["w1", "zz"], "max_tokens": 4, "stream": stream})
    text = streamed(r.text)[0][0] if stream else r.json()["choices"][0]["text"]
    assert text == "w1 here w0 "
    sent = upstream.requests[0]["body"]
    assert sent["echo"] is True and "stop" not in sent


def test_stops_within_the_vendor_limit_go_to_the_vendor(vclient, upstream):
    r = vclient.post("/v5/completions", json={"model": "fewstops/m", "prompt": "x", "stop": "w1", "max_tokens": 4})
    assert r.json()["choices"][0]["text"] == " w0 "
    assert upstream.requests[0]["body"]["stop"] == ["w1"]


def test_best_of_generates_every_candidate_and_returns_n(vclient, upstream):
    r = vclient.post("/v5/completions", json={"model": "bare/m", "prompt": "x", "best_of": 3, "max_tokens": 2})
    assert r.status_code == 200, r.text
    (choice,) = r.json()["choices"]
    assert choice == {"index": 0, "text": " w0 w1", "finish_reason": "length", "logprobs": None}
    # Every candidate's tokens were generated (and billed); the prompt was read once per candidate
    # but, as OpenAI counts best_of, is counted once.
    assert (r.json()["usage"]["prompt_tokens"], r.json()["usage"]["completion_tokens"]) == (1, 3 * 2)
    assert [(req["body"].get("best_of"), req["body"]["logprobs"]) for req in upstream.requests] == [(None, 0)] * 3


def test_user_is_recorded_not_sent_to_a_server_without_it(vclient, upstream, database):
    r = vclient.post("/v5/completions", json={"model": "bare/m", "prompt": "x", "user": "u-1", "max_tokens": 1})
    assert r.status_code == 200 and "user" not in upstream.requests[0]["body"]
    assert ledger_row(database.url, "acct-a", r.headers["x-request-id"])["end_user"] == "u-1"
