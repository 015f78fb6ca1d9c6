"""The vendor parsers against arbitrary input (hypothesis), in-process: whatever JSON or bytes a
vendor sends, each parser either refuses it with its typed error or returns a result the gateway
can use as it is (types right, counts and indexes in range, serialisable).

The pure readers may raise only `untrusted.Malformed` (or `Reported`, a vendor's own error event):
anything else would be a shape no check foresaw. Through the adapters (httpx.MockTransport in
front of the real `complete`/`stream`), the only failure is VendorFailed, and its message holds no
part of what the vendor sent in place of a value (here: the vendor's key). Example counts stay
modest; the suite runs them on every change."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import math
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.endpoint import Endpoint
from gateway.core.completion import MAX_USAGE_TOKENS, Choice, CompletionCall, Result, Usage
from gateway.core.config import Settings, VendorConfig
from gateway.core.errors import MAX_RETRY_AFTER, GatewayError, RateLimited, VendorFailed
from gateway.vendors import logprobs, registry
from gateway.vendors.anthropic import completions as anthropic
from gateway.vendors.gemini import completions as gemini
from gateway.vendors.openai import completions as openai
from gateway.vendors.openai import chat as openai_chat
from gateway.vendors import untrusted as read
from gateway.vendors.local.completions import _Piece
from gateway.vendors.local.engine import EngineError
from gateway.vendors.transport.sse_reader import EventParser, MalformedStream
from gateway.vendors.vendor_errors import retry_after_seconds
from tests.support.fakes.httpx_client import answered_by
from tests.support.vendor_answers import (
    ANTHROPIC_EVENT,
    ANTHROPIC_MESSAGE,
    CALLS,
    COUNT,
    ENGINE_ENTRY,
    GEMINI,
    KEY,
    OPENAI,
    OPENAI_CHOICE,
    OPENAI_USAGE,
    fields,
    maybe,
)

FINISH = {None, "stop", "length", "content_filter"}
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
THROUGH_HTTP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- what a usable result is --------------------------------------------------------------------------
def check_legacy(lp: dict) -> None:
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert len({len(column) for column in lp.values()}) == 1
    assert all(isinstance(t, str) and len(t) <= read.MAX_TOKEN_BYTES * 4 + 10 for t in lp["tokens"])
    assert all(v is None or (isinstance(v, float) and math.isfinite(v) and v <= 0) for v in lp["token_logprobs"])
    for top in lp["top_logprobs"]:
        assert top is None or (len(top) <= read.MAX_ALTERNATIVES and all(
            isinstance(k, str) and isinstance(v, float) and math.isfinite(v) and v <= 0 for k, v in top.items()))
    assert all(type(at) is int and at >= 0 for at in lp["text_offset"])


def check_choices(choices: list[Choice], bound: int) -> None:
    for choice in choices:
        assert type(choice.index) is int and 0 <= choice.index < bound
        assert isinstance(choice.text, str) and choice.finish_reason in FINISH
        if choice.logprobs is not None:
            check_legacy(choice.logprobs)


def check_usage(usage: Usage | None) -> None:
    if usage is None:
        return
    for count in (usage.prompt_tokens, usage.completion_tokens):
        assert type(count) is int and 0 <= count <= MAX_USAGE_TOKENS
    for details in (usage.prompt_tokens_details, usage.completion_tokens_details):
        assert details is None or (len(details) <= read.MAX_DETAILS and all(
            type(v) is int and 0 <= v <= MAX_USAGE_TOKENS for v in details.values()))


def check_result(result: Result, bound: int) -> None:
    check_choices(result.choices, bound)
    check_usage(result.usage)
    assert result.system_fingerprint is None or isinstance(result.system_fingerprint, str)
    orjson.dumps(dataclasses.asdict(result))  # what the handler will do with it


def attempt(read_it, *args):
    """(what `read_it(*args)` returned, None) or (None, what it raised)."""
    try:
        return read_it(*args), None
    except Exception as exc:  # noqa: BLE001 - which exception it is, is what the tests check
        return None, exc


def refused_cleanly(exc: Exception) -> None:
    """A reader's refusal: typed, short, quoting nothing the vendor sent."""
    assert isinstance(exc, read.Malformed), f"{type(exc).__name__}: {exc}"
    assert KEY[:8] not in str(exc) and len(str(exc)) < 300


# -- the pure readers ---------------------------------------------------------------------------------
@FAST
@given(call=CALLS, data=maybe(OPENAI))
def test_openai_completion_reader(call, data):
    result, failure = attempt(openai.read_completion, data, call)
    if failure:
        return refused_cleanly(failure)
    check_result(result, call.n * len(call.prompts))
    assert len({c.index for c in result.choices}) == len(result.choices)
    return None


@FAST
@given(call=CALLS, payloads=st.lists(maybe(fields(choices=st.lists(OPENAI_CHOICE, max_size=3),
                                                 usage=st.one_of(st.none(), OPENAI_USAGE))), max_size=4))
def test_openai_stream_chunk_reader(call, payloads):
    reader = openai.ChunkReader(call)
    for payload in payloads:
        chunk, failure = attempt(reader.read, payload)
        if isinstance(failure, read.Reported):
            assert isinstance(failure.message, str)
            return None
        if failure:
            return refused_cleanly(failure)
        check_choices(chunk.choices, call.n * len(call.prompts))
        check_usage(chunk.usage)
    return None


def outcome_of(read_it, *args) -> tuple[str, object]:
    got, failure = attempt(read_it, *args)
    return ("failed", (type(failure), str(failure))) if failure else ("read", got)


@FAST
@given(call=CALLS, payloads=st.lists(maybe(fields(choices=st.lists(OPENAI_CHOICE, max_size=3),
                                                 usage=st.one_of(st.none(), OPENAI_USAGE))), max_size=4))
def test_openai_stream_chunks_read_from_their_json_as_from_the_decoded_value(call, payloads):
    """ChunkReader.read_json reads a chunk of the usual shape on a path of its own: it must give
    what `read` gives for the same JSON, answer and refusal alike, chunk after chunk."""
    from_json, from_value = openai.ChunkReader(call), openai.ChunkReader(call)
    for payload in payloads:
        data = json.dumps(payload)
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:  # a value JSON cannot carry (an integer too large for orjson)
            assert outcome_of(from_json.read_json, data)[0] == "failed"
            return
        assert outcome_of(from_json.read_json, data) == outcome_of(from_value.read, value)


CHAT_DELTA = fields(content=st.one_of(st.none(), st.text(max_size=8)), role=st.just("assistant"),
                    tool_calls=st.one_of(st.none(), st.lists(fields(index=st.integers(0, 1), id=st.text(max_size=4)),
                                                             max_size=2)),
                    refusal=st.one_of(st.none(), st.text(max_size=4)))
CHAT_CHOICE = fields(index=st.integers(0, 2), delta=CHAT_DELTA,
                     finish_reason=st.sampled_from(["stop", None, "tool_calls", "length", ""]),
                     logprobs=st.one_of(st.none(), fields(content=st.lists(ENGINE_ENTRY, max_size=2))))


@FAST
@given(n=st.integers(1, 3), payloads=st.lists(maybe(fields(choices=st.lists(CHAT_CHOICE, max_size=3),
                                                             usage=st.one_of(st.none(), OPENAI_USAGE))), max_size=4))
def test_openai_chat_stream_chunks_read_from_their_json_as_from_the_decoded_value(n, payloads):
    """read_chat_chunk_json reads a chunk of text in the usual shape on a path of its own: it must
    give what read_chat_chunk gives for the same JSON, answer and refusal alike."""
    for payload in payloads:
        data = json.dumps(payload)
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:  # a value JSON cannot carry (an integer too large for orjson)
            assert outcome_of(openai_chat.read_chat_chunk_json, data, n)[0] == "failed"
            continue
        assert outcome_of(openai_chat.read_chat_chunk_json, data, n) == outcome_of(openai_chat.read_chat_chunk,
                                                                                   value, n)


@pytest.mark.parametrize("depth", [500, 1010, 1100])
def test_a_deeply_nested_chunk_reads_on_both_paths_as_the_general_reader_reads_it(depth):
    # msgspec stops nesting (RecursionError) below orjson's limit: the typed paths fall back.
    nested = "[" * depth + "]" * depth
    chat = '{"choices": [{"index": 0, "delta": {"content": "a", "x": %s}}]}' % nested
    text = '{"choices": [{"index": 0, "text": "a", "x": %s}]}' % nested
    call = CompletionCall(model="m", prompts=["p"], n=1, stream=True)
    for fast, general in ((lambda: openai_chat.read_chat_chunk_json(chat, 1),
                           lambda: openai_chat.read_chat_chunk(orjson.loads(chat), 1)),
                          (lambda: openai.ChunkReader(call).read_json(text),
                           lambda: openai.ChunkReader(call).read(orjson.loads(text)))):
        assert outcome_of(fast) == outcome_of(general)


@pytest.mark.parametrize("index", [2**64, -(2**63) - 1, 10**30, 1, -1])
def test_an_index_out_of_range_is_refused_for_the_same_reason_on_both_paths(index):
    # Found by the property test above: orjson reads an integer past 64 bits as a float, msgspec
    # as an integer, so the two paths once refused it with different reasons.
    call = CompletionCall(model="m", prompts=["p"], n=1, stream=True)
    data = json.dumps({"choices": [{"index": 0, "text": "a", "logprobs": None},
                                   {"index": index, "text": "b"}]})
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        assert outcome_of(openai.ChunkReader(call).read_json, data)[0] == "failed"
        return
    from_json = outcome_of(openai.ChunkReader(call).read_json, data)
    assert from_json[0] == "failed"
    assert from_json == outcome_of(openai.ChunkReader(call).read, value)


@FAST
@given(data=maybe(ANTHROPIC_MESSAGE), moved=st.sampled_from(["", " ", "\n "]))
def test_anthropic_message_reader(data, moved):
    result, failure = attempt(anthropic.read_message, data, anthropic._Reply(moved))
    if failure:
        return refused_cleanly(failure)
    check_result(result, 1)
    return None


@FAST
@given(events=st.lists(maybe(ANTHROPIC_EVENT), max_size=6))
def test_anthropic_stream_event_reader(events):
    reader = anthropic.EventReader(anthropic._Reply(" "))
    for event in events:
        chunk, failure = attempt(reader.read, event)
        if isinstance(failure, read.Reported):
            assert isinstance(failure.message, str)
            return None
        if failure:
            return refused_cleanly(failure)
        if chunk is not None:
            check_choices(chunk.choices, 1)
            check_usage(chunk.usage)
    return None


@FAST
@given(call=CALLS, responses=st.lists(maybe(GEMINI), min_size=1, max_size=4))
def test_gemini_response_reader(call, responses):
    call.prompts = ["p"]  # one prompt per call
    reader = gemini.Reader(call)
    for response in responses:
        choices, failure = attempt(reader.read, response)
        if failure:
            return refused_cleanly(failure)
        assert len(choices) <= call.n
        check_choices(choices, call.n)
        check_usage(reader.usage)
    return None


@FAST
@given(entry=maybe(ENGINE_ENTRY))
def test_engine_logprobs_entry(entry):
    token, failure = attempt(logprobs.from_engine, entry)
    if failure:
        return refused_cleanly(failure)
    assert isinstance(token.raw, bytes) and len(token.raw) <= 4 * read.MAX_TOKEN_BYTES
    assert math.isfinite(token.logprob) and token.logprob <= 0
    assert len(token.top) <= read.MAX_ALTERNATIVES
    check_legacy(logprobs.legacy([token], 5, logprobs.Offsets()))
    return None


def test_a_logprobs_entry_claiming_a_huge_byte_count_is_refused_unallocated():
    for claimed in (3 * 10**8, 10**15, -1):
        with pytest.raises(read.Malformed, match="bytes"):
            logprobs.from_engine({"token": "x", "bytes": claimed, "logprob": -0.1})
    with pytest.raises(read.Malformed, match="longer than"):
        logprobs.from_engine({"token": "x", "bytes": [65] * (read.MAX_TOKEN_BYTES + 1), "logprob": -0.1})


@FAST
@given(chunk=maybe(fields(choices=st.lists(fields(text=st.text(max_size=6), finish_reason=st.just("stop"),
                                                 logprobs=fields(content=st.lists(ENGINE_ENTRY, max_size=2))),
                                          min_size=1, max_size=2),
                         usage=fields(prompt_tokens=COUNT, completion_tokens=COUNT))))
def test_local_engine_chunk(chunk):
    piece, failure = attempt(_Piece.of, chunk)
    if failure:
        assert isinstance(failure, EngineError), f"{type(failure).__name__}: {failure}"
        assert KEY[:8] not in failure.message
        return
    assert isinstance(piece.text, str) and piece.finish_reason in FINISH
    check_usage(piece.usage)


# -- server-sent events ------------------------------------------------------------------------------
SSE_LINES = st.lists(st.one_of(
    st.builds(lambda d: f"data: {d}\n", st.text(max_size=10)), st.builds(lambda e: f"event: {e}\n", st.text(max_size=6)),
    st.just("\n"), st.just("\r\n"), st.just(": ping\n"), st.text(max_size=8)), max_size=12).map(
    lambda lines: "".join(lines).encode())


def events_of(data: bytes, cuts: list[int], limit: int | None = None) -> list[tuple[str | None, str]] | str:
    """The events of `data` arriving in pieces cut at `cuts`, or "malformed"."""
    bounds = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    parser = EventParser() if limit is None else EventParser(max_event_bytes=limit)
    try:
        return [(e.event, e.data) for a, b in itertools.pairwise(bounds) for e in parser.feed(data[a:b])]
    except MalformedStream:
        return "malformed"


@FAST
@given(data=st.one_of(SSE_LINES, st.binary(max_size=64)), cuts=st.lists(st.integers(0, 80), max_size=6))
def test_sse_reader_reads_the_same_events_however_the_bytes_are_cut(data, cuts):
    assert events_of(data, cuts) == events_of(data, [])


@FAST
@given(data=st.one_of(SSE_LINES, st.binary(max_size=64)), cuts=st.lists(st.integers(0, 80), max_size=6))
def test_sse_reader_never_holds_an_event_over_its_limit(data, cuts):
    events = events_of(data, cuts, limit=16)
    assert events == "malformed" or all(len(d.encode()) + len((e or "").encode()) <= 16 for e, d in events)


def test_a_line_without_end_is_refused_at_the_limit_not_buffered():
    parser = EventParser(max_event_bytes=10_000)
    parser.feed(b"data: ")
    fed = 0
    with pytest.raises(MalformedStream, match="larger than 10000 bytes"):
        while True:
            fed += 1000
            parser.feed(b"a" * 1000)
    assert fed <= 11_000


# -- Retry-After ---------------------------------------------------------------------------------------
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("header", "seconds"), [
    ("0", 0), ("120", 120), ("1.5", 1.5), ("9" * 400, MAX_RETRY_AFTER), ("inf", None), ("-inf", None), ("nan", None),
    ("-5", None), ("soon", None), ("", None),
    # float() reads each of these as a number; none is RFC 9110's delay-seconds (digits)
    ("1_0", None), ("1e308", None), ("1e3", None), ("+5", None), (" 10", None), ("10 ", None), ("0x10", None),
    ("١٠", None),  # Arabic-Indic digits: float() reads 10
    (format_datetime(NOW + timedelta(seconds=30), usegmt=True), 30), ("Thu, 01 Jan 2026 00:00:30 GMT", 30),
    ("Thursday, 01-Jan-26 00:00:30 GMT", 30), ("Thu Jan  1 00:00:30 2026", 30),  # RFC 850, asctime
    ("Wed, 31 Dec 2025 23:00:00 GMT", 0), ("Fri, 01 Jan 2100 00:00:00 GMT", MAX_RETRY_AFTER),
])  # fmt: skip
def test_retry_after_is_seconds_or_an_http_date_bounded(header, seconds):
    assert retry_after_seconds(header, now=NOW) == seconds


@FAST
@given(header=st.one_of(st.text(max_size=40), st.floats().map(repr), st.integers().map(str)))
def test_retry_after_is_never_unbounded(header):
    seconds = retry_after_seconds(header, now=NOW)
    assert seconds is None or (math.isfinite(seconds) and 0 <= seconds <= MAX_RETRY_AFTER)


@FAST
@given(wait=st.one_of(st.floats(), st.integers()))
def test_an_error_never_renders_an_unbounded_retry_after(wait):
    header = RateLimited("slow down", retry_after=wait).headers().get("retry-after")
    assert header is None or (header.isdigit() and int(header) <= MAX_RETRY_AFTER)


# -- through the adapters: only VendorFailed, never the vendor's data in the message -------------------
def adapter(protocol: str):
    config = VendorConfig(name="v", protocol=protocol, base_url="http://vendor.test/v1", api_key=KEY,
                          options={"max_candidates": "3"} if protocol == "gemini" else {})
    return registry.build(config, Settings())


ADAPTERS = {protocol: adapter(protocol) for protocol in ("openai", "anthropic", "gemini")}
ANSWERS = {"openai": OPENAI, "anthropic": ANTHROPIC_MESSAGE, "gemini": GEMINI}
EVENTS = {"openai": fields(choices=st.lists(OPENAI_CHOICE, max_size=2), usage=st.one_of(st.none(), OPENAI_USAGE)),
          "anthropic": ANTHROPIC_EVENT, "gemini": GEMINI}


def dumps(value) -> bytes:
    """JSON as a vendor may write it (integers of any size)."""
    return json.dumps(value).encode()


def serve(vendor, body: bytes, content_type: str) -> None:
    vendor.use_clients(answered_by(lambda request: httpx.Response(
        200, content=body, headers={"content-type": content_type})))


def outcome(vendor, call: CompletionCall) -> list | Result | GatewayError:
    async def run():
        if not call.stream:
            return await vendor.translators[Endpoint.COMPLETIONS].complete(call)
        return [chunk async for chunks in vendor.translators[Endpoint.COMPLETIONS].stream(call) for chunk in chunks]

    try:
        return asyncio.run(run())
    except GatewayError as exc:
        return exc


def check_outcome(result, call: CompletionCall) -> None:
    if isinstance(result, GatewayError):
        assert isinstance(result, VendorFailed), f"{type(result).__name__}: {result.message}"
        assert KEY[:8] not in result.message and len(result.message) < 700, result.message
        return
    bound = call.n * len(call.prompts)
    if isinstance(result, Result):
        return check_result(result, bound)
    for chunk in result:
        check_choices(chunk.choices, bound)
        check_usage(chunk.usage)
    return None


@pytest.mark.parametrize("protocol", ADAPTERS)
@THROUGH_HTTP
@given(data=st.data(), n=st.integers(1, 3))
def test_an_adapter_answers_or_fails_with_vendor_failed(protocol, data, n):
    vendor = ADAPTERS[protocol]
    call = CompletionCall(model="m", prompts=["p"], n=n if protocol != "anthropic" else 1, logprobs=2)
    body = data.draw(st.one_of(maybe(ANSWERS[protocol]).map(dumps), st.binary(max_size=40)))
    serve(vendor, body, "application/json")
    check_outcome(outcome(vendor, call), call)


@pytest.mark.parametrize("protocol", ADAPTERS)
@THROUGH_HTTP
@given(data=st.data(), n=st.integers(1, 3))
def test_an_adapter_streams_or_fails_with_vendor_failed(protocol, data, n):
    vendor = ADAPTERS[protocol]
    call = CompletionCall(model="m", prompts=["p"], n=n if protocol != "anthropic" else 1, logprobs=2, stream=True)
    events = data.draw(st.lists(maybe(EVENTS[protocol]), max_size=5))
    body = b"".join(b"data: " + dumps(e) + b"\n\n" for e in events)
    ending = data.draw(st.sampled_from([b"", b"data: [DONE]\n\n", b'event: message_stop\ndata: {"type": "message_stop"}\n\n',
                                        b"data: {broken\n\n", b"\xff\xfe\n\n"]))
    serve(vendor, body + ending, "text/event-stream")
    check_outcome(outcome(vendor, call), call)
