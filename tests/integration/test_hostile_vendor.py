"""Vendors that send nonsense (issue 15, the vendor side), end to end: the real gateway in front of
a hostile OpenAI-compatible vendor (tests/support/fakes/hostile_upstream.py) and the Anthropic and Gemini
fakes' hostile models, on loopback.

Every case asserts three things: what the client got (a 502 `vendor_error`, or an error event and
[DONE] once a stream had started; never a 500), the request's ledger row read from the database
(written, with the right outcome), and that the gateway still answers /healthz at once afterwards
(a pinned event loop would hold it for seconds; the 1 s client timeout is a safety net, not a bound
under test). The gateway admits one request at a time, so a case that left its admission slot
taken would fail the next one."""

from __future__ import annotations

import json
import secrets
import socket

import httpx
import pytest

from gateway.core.errors import MAX_RETRY_AFTER
from gateway.store.tokens import PIECE
from gateway.vendors.transport.answers import MAX_ANSWER_BYTES
from gateway.vendors.transport.sse_reader import MAX_EVENT_BYTES
from tests.support.bodies import chunks_of, sse_events
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.fakes.hostile_upstream import MIB, HostileOpenAI, word
from tests.support.fakes.server import serve
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import assert_responsive, memory, wait_until
from tests.support.provision import create_key, empty_database, ledger_rows, postgres_unavailable

# Keys the vendors are configured with. Not key-shaped (no "sk-"), so only the gateway's knowledge of
# its own keys can scrub them.
KEYS = {"hostile": "hv-Zq8Xv3Lp9Rt2Wm5Yb7Nc4Hd6Jf1Kg0Tz", "claude": "ha-Pw4Ns8Kd2Lq6Xr0Vt3Hm7Jc5Gb9Fy1Sa",
        "gem": "hg-Tb6Mv1Qx8Ld3Zn5Kw0Rp2Hs9Jc4Yf7Ge"}  # fmt: skip
PROMPT = "hello hostile world"
GROWTH = 64 << 20  # bytes: a peak this much higher for one small request means something was allocated whole


def peak_growth(pid: int, action):
    """How far above its resident memory at the start the process's peak went while `action()`
    ran, and what `action()` returned. (Where the peak cannot be reset, the memory it still holds
    afterwards.)"""
    before = memory(pid, "VmRSS")
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as clear:
            clear.write("5")  # the peak starts again from the current resident memory
        field = "VmHWM"
    except OSError:
        field = "VmRSS"
    result = action()
    return memory(pid, field) - before, result


@pytest.fixture(scope="module")
def hostile():
    yield from serve(HostileOpenAI())


@pytest.fixture(scope="module")
def ledger_db():
    """The module's database: PostgreSQL when the tests have one (where out-of-range usage stopped
    the ledger), else SQLite. One account, whose key every request uses."""
    with empty_database("sqlite" if postgres_unavailable() else "postgresql") as url:
        account = f"acct-{secrets.token_hex(4)}"
        yield url, account, create_key(url, account)


@pytest.fixture(scope="module")
def hostile_gateway(upstream, hostile, anthropic_upstream, gemini_upstream, ledger_db):
    env = gateway_env(upstream.url, ledger_db[0], GATEWAY_MAX_CONCURRENT="1")
    vendors = {"hostile": ("openai", f"{hostile.url}/v1"), "claude": ("anthropic", anthropic_upstream.url),
               "gem": ("gemini", f"{gemini_upstream.url}/v1beta")}  # fmt: skip
    for name, (protocol, url) in vendors.items():
        prefix = f"GATEWAY_VENDOR_{name.upper()}_"
        env |= {prefix + "PROTOCOL": protocol, prefix + "BASE_URL": url, prefix + "API_KEY": KEYS[name],
                prefix + "RETRIES": "0", prefix + "FIRST_BYTE": "10", prefix + "IDLE": "10"}  # fmt: skip
    env["GATEWAY_VENDOR_GEM_MAX_CANDIDATES"] = "4"
    with GatewayProcess(env) as process:
        yield process


@pytest.fixture
def gateway(hostile_gateway):
    return hostile_gateway


@pytest.fixture
def client(hostile_gateway, ledger_db):
    with httpx.Client(base_url=hostile_gateway.url, headers={"x-api-key": ledger_db[2]}, timeout=30, verify=SHARED_TLS) as c:
        yield c


class Call:
    """One request to the gateway, tagged (its `user`) so that its ledger row can be found."""

    def __init__(self, client: httpx.Client, model: str, stream: bool = False, **extra) -> None:
        self.tag = f"t-{secrets.token_hex(6)}"
        self.body = {"model": model, "prompt": PROMPT, "max_tokens": 3, "user": self.tag, "stream": stream, **extra}
        self.response = client.post("/v5/completions", json=self.body)
        self.stream = stream

    @property
    def error(self) -> dict:
        """The error the client got: the body's, or a stream's error event (checked to be followed by [DONE])."""
        if not self.stream or self.response.status_code != 200:
            assert self.response.status_code != 500, self.response.text
            return self.response.json()["error"]
        events = sse_events(self.response.text)
        assert events[-1] == {"event": "done", "data": "[DONE]"}, events[-3:]
        error = json.loads(events[-2]["data"])["error"]
        assert any("choices" in json.loads(e["data"]) for e in events[:-2]), "the stream had started"
        return error

    def text(self) -> str:
        if not self.stream:
            return "".join(c["text"] for c in self.response.json()["choices"])
        chunks = [json.loads(e["data"]) for e in sse_events(self.response.text)[:-1]]
        return "".join(c["text"] for chunk in chunks for c in chunk.get("choices", ()))


def row_of(ledger_db, tag: str) -> dict:
    """The ledger row of the request tagged `tag`, once written."""
    url, account, _ = ledger_db
    rows = wait_until(lambda: [r for r in ledger_rows(url, account) if r["end_user"] == tag],
                      message=f"the ledger row of {tag}")
    assert len(rows) == 1
    return rows[0]


def assert_failed_on_the_vendor(call: Call, ledger_db, vendor: str, status: int = 502, says: str = "") -> dict:
    """The client got the vendor's failure, and the ledger a vendor_error row: estimated from what
    a stream delivered before the failure, billing nothing when the client got no text (or, for the
    vendor's 400 refusing the request itself, a rejected row billing nothing)."""
    if not call.stream:
        assert call.response.status_code == status, call.response.text
    error = call.error
    assert (error["type"], error["vendor"]) == ({400: "invalid_request_error", 429: "rate_limit_error"}.get(
        status, "vendor_error"), vendor), error
    assert says in error["message"], error["message"]
    row = row_of(ledger_db, call.tag)
    if status == 400:
        assert (row["outcome"], row["estimated"], row["total_tokens"], row["cost_nanos"]) == ("rejected", False, 0, 0)
        return row
    if not call.stream or not call.text():
        assert (row["outcome"], row["estimated"], row["total_tokens"], row["cost_nanos"]) == (
            "vendor_error", False, 0, 0), row
        return row
    assert (row["outcome"], row["estimated"]) == ("vendor_error", True), row
    assert 0 < row["prompt_tokens"] <= len(PROMPT)
    assert row["completion_tokens"] <= call.body["max_tokens"] * call.body.get("n", 1)  # estimated from what was sent
    return row


# -- D1: usage out of range -------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("case", ["1e30", "3e9", "negative", "fraction", "details-huge"])
def test_usage_out_of_range_is_a_vendor_error_and_the_ledger_goes_on(client, gateway, ledger_db, case, stream):
    call = Call(client, f"hostile/usage-{case}", stream)
    assert_failed_on_the_vendor(call, ledger_db, "hostile", says="usage")
    later = Call(client, "hostile/ok")  # rows after it are written too
    assert later.response.status_code == 200
    assert row_of(ledger_db, later.tag)["outcome"] == "completed"
    assert_responsive(gateway)


def test_usage_as_a_whole_float_is_taken_and_junk_details_are_left_out(client, gateway, ledger_db):
    call = Call(client, "hostile/usage-whole-float")
    assert call.response.status_code == 200, call.response.text
    assert call.response.json()["usage"]["prompt_tokens"] == 12
    assert row_of(ledger_db, call.tag)["prompt_tokens"] == 12
    call = Call(client, "hostile/usage-details-junk", stream=True, stream_options={"include_usage": True})
    (usage,) = [chunk["usage"] for chunk in chunks_of(call.response.text) if chunk.get("usage")]
    assert usage["prompt_tokens"] > 0 and "prompt_tokens_details" not in usage
    row = row_of(ledger_db, call.tag)
    assert (row["outcome"], row["estimated"], row["cached_tokens"]) == ("completed", False, None)
    assert_responsive(gateway)


# -- D3: the vendor's key never reaches a client ------------------------------------------------------
def assert_no_part_of(key: str, response: httpx.Response) -> None:
    seen = response.text + json.dumps(dict(response.headers))
    parts = [key[i : i + 8] for i in range(len(key) - 7)]
    assert not [part for part in parts if part in seen], seen[:2000]


@pytest.mark.parametrize(("model", "stream", "status"), [
    ("hostile/leak-error-json", False, 502),  # a non-200 answer's JSON message
    ("hostile/leak-error-text", False, 502),  # a plain-text one, the key straddling the message's clip
    ("hostile/leak-reject", False, 400),
    ("hostile/leak-stream-error", True, 200),  # OpenAI's mid-stream `data: {"error"}`
    ("hostile/leak-first-error", True, 502),  # the same before anything was sent
    ("hostile/leak-malformed", False, 502),  # a malformed answer that is the key
    ("hostile/leak-not-json", False, 502),
    ("hostile/index-key", False, 502),  # a value whose exception text would quote it
    ("hostile/usage-key", False, 502),
    ("hostile/usage-key", True, 200),
    ("claude/leak-stream-error", True, 200),  # Anthropic's `event: error`
    ("claude/leak-malformed", False, 502),
])  # fmt: skip
def test_the_vendor_key_quoted_back_never_reaches_the_client(client, gateway, ledger_db, model, stream, status):
    vendor = model.partition("/")[0]
    call = Call(client, model, stream)
    assert call.response.status_code == status, call.response.text
    assert_no_part_of(KEYS[vendor], call.response)
    assert_failed_on_the_vendor(call, ledger_db, vendor, status=status if status != 200 else 502)
    assert_responsive(gateway)


# -- D4: logprobs ----------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("case", ["bytes-300000000", "bytes-1000000000000000", "positive", "legacy-junk"])
def test_malformed_logprobs_are_refused_without_allocating_what_they_claim(client, gateway, ledger_db, case, stream):
    growth, call = peak_growth(gateway.proc.pid, lambda: Call(client, f"hostile/logprobs-{case}", stream, logprobs=1))
    assert_failed_on_the_vendor(call, ledger_db, "hostile", says="logprob")
    assert growth < GROWTH
    assert_responsive(gateway)


def test_a_legitimately_big_logprobs_answer_is_served(client, gateway, ledger_db):
    call = Call(client, "hostile/logprobs-big", logprobs=5)
    assert call.response.status_code == 200, call.response.text
    logprobs = call.response.json()["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == len(logprobs["top_logprobs"]) == 3000
    assert all(len(top) == 5 for top in logprobs["top_logprobs"])
    assert row_of(ledger_db, call.tag)["outcome"] == "completed"
    assert_responsive(gateway)


# -- D5: Retry-After ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("case", "passed_on"), [
    ("inf", None), ("minus-inf", None), ("nan", None), ("junk", None), ("1e308", None),
    ("far-date", str(MAX_RETRY_AFTER)),
    ("past-date", "0"), ("obsolete-date", "0"), ("asctime-date", "0"),
])  # fmt: skip
def test_retry_after_is_passed_on_only_as_a_bounded_number(client, gateway, ledger_db, case, passed_on):
    call = Call(client, f"hostile/retry-{case}")
    assert call.response.status_code == 429, call.response.text
    assert call.response.headers.get("retry-after") == passed_on
    assert_failed_on_the_vendor(call, ledger_db, "hostile", status=429)
    assert_responsive(gateway)


# -- choice indexes and candidate counts --------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("model", ["hostile/index-huge", "hostile/index-negative", "hostile/index-beyond",
                                   "gem/extra-candidates", "gem/index-beyond"])
def test_a_choice_index_out_of_range_is_a_vendor_error(client, gateway, ledger_db, model, stream):
    call = Call(client, model, stream, n=2)
    assert_failed_on_the_vendor(call, ledger_db, model.partition("/")[0])
    assert_responsive(gateway)


# -- sizes ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("model", "stream", "limit"), [("endless-line", True, MAX_EVENT_BYTES),
                                                        ("huge-body", False, MAX_ANSWER_BYTES),
                                                        ("huge-length", False, MAX_ANSWER_BYTES)])
def test_an_answer_without_end_is_cut_at_its_limit(client, gateway, ledger_db, hostile, model, stream, limit):
    growth, call = peak_growth(gateway.proc.pid, lambda: Call(client, f"hostile/{model}", stream))
    assert call.response.status_code == 502, call.response.text
    assert f"larger than {limit} bytes" in call.error["message"]
    assert_failed_on_the_vendor(call, ledger_db, "hostile")
    served = hostile.served(model)
    wait_until(lambda: served.ended, message="the vendor to see the gateway hang up")
    assert served.client_left
    if model == "huge-length":
        assert served.sent < MIB  # refused on its declared length
    assert growth < limit + GROWTH
    assert_responsive(gateway)


def test_a_stream_of_one_five_megabyte_word_is_served_and_billed_promptly(client, gateway, ledger_db):
    """D2: the estimate of a vendor that reported no usage counts 5 MiB of letters that never repeat,
    without spaces (bounded work)."""
    call = Call(client, "hostile/word-5mb", stream=True, max_tokens=10**7)
    assert call.response.status_code == 200
    assert call.text() == word(5)
    assert_responsive(gateway)  # while the gateway counts
    row = row_of(ledger_db, call.tag)
    assert (row["outcome"], row["estimated"]) == ("completed", True)
    assert 5 * MIB / PIECE <= row["completion_tokens"] <= 5 * MIB
    assert_responsive(gateway)


def test_a_long_prompt_the_vendor_rejects_is_recorded_promptly_and_bills_nothing(client, gateway, ledger_db):
    """D2: a 200,000-character run the vendor refused with a 400: the request's own mistake, so a
    rejected row with nothing billed (and nothing to count)."""
    tag = f"t-{secrets.token_hex(6)}"
    prompt = "a" * 200_000
    r = client.post("/v5/completions", json={"model": "hostile/reject-400", "prompt": prompt, "user": tag})
    assert r.status_code == 400 and r.json()["error"]["code"] == "vendor_rejected"
    row = row_of(ledger_db, tag)
    assert (row["outcome"], row["estimated"], row["prompt_tokens"], row["cost_nanos"]) == ("rejected", False, 0, 0)
    assert_responsive(gateway)


# -- D7: a client that leaves a non-streamed request ---------------------------------------------------
def test_a_client_that_leaves_a_slow_request_cancels_the_vendor_call(client, gateway, ledger_db, hostile):
    tag = f"t-{secrets.token_hex(6)}"
    body = json.dumps({"model": "hostile/slow", "prompt": PROMPT, "user": tag}).encode()
    head = (f"POST /v5/completions HTTP/1.1\r\nhost: gateway\r\nx-api-key: {ledger_db[2]}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as s:
        s.sendall(head + body)
        wait_until(lambda: hostile.waiting == 1, message="the vendor to hold the request")
    served = hostile.served("slow")
    wait_until(lambda: served.ended, message="the vendor call to be cancelled")
    assert served.client_left  # the gateway hung up on the vendor, which never answered
    row = row_of(ledger_db, tag)
    assert row["outcome"] == "client_disconnected"
    # The gateway admits one request at a time: the slot of the one that left is free again.
    assert Call(client, "hostile/ok").response.status_code == 200
    assert_responsive(gateway)


def test_a_pipelining_client_that_leaves_cancels_the_request_being_answered(client, gateway, ledger_db, hostile):
    # uvicorn tells only the newest request of a connection that its client left, here the second,
    # still queued: the first, waiting for its vendor, must hear it too.
    tags = [f"t-{secrets.token_hex(6)}" for _ in range(2)]
    requests = b""
    for tag in tags:
        body = json.dumps({"model": "hostile/slow", "prompt": PROMPT, "user": tag}).encode()
        requests += (f"POST /v5/completions HTTP/1.1\r\nhost: gateway\r\nx-api-key: {ledger_db[2]}\r\n"
                     f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as s:
        s.sendall(requests)
        wait_until(lambda: hostile.waiting == 1, message="the vendor to hold the first request")
    served = hostile.served("slow")
    wait_until(lambda: served.ended, message="the vendor call to be cancelled")
    assert served.client_left
    assert row_of(ledger_db, tags[0])["outcome"] == "client_disconnected"
    assert Call(client, "hostile/ok").response.status_code == 200  # its admission slot is free again
    assert "Exception in ASGI application" not in gateway.log()
    assert_responsive(gateway)


def test_sigterm_while_an_estimate_is_counted_writes_its_row_and_exits(upstream, hostile, ledger_db):
    """D2: shutdown waits for the count of a long prompt whose stream the vendor broke off after
    some text (bounded work), not for ever, and the row is written before the gateway exits."""
    url, _, key = ledger_db
    env = gateway_env(upstream.url, url, GATEWAY_VENDOR_HOSTILE_PROTOCOL="openai",
                      GATEWAY_VENDOR_HOSTILE_BASE_URL=f"{hostile.url}/v1", GATEWAY_VENDOR_HOSTILE_RETRIES="0")
    tag = f"t-{secrets.token_hex(6)}"
    prompt = word(1)[:900_000]  # letters that never repeat, just under the body limit
    with GatewayProcess(env) as process:
        with httpx.Client(base_url=process.url, headers={"x-api-key": key}, timeout=30, verify=SHARED_TLS) as http:
            r = http.post("/v5/completions", json={"model": "hostile/index-huge", "prompt": prompt, "user": tag,
                                                   "stream": True})
        assert r.status_code == 200 and '"error"' in r.text
        assert process.stop() == 0
    row = row_of(ledger_db, tag)
    assert (row["outcome"], row["estimated"]) == ("vendor_error", True)
    assert len(prompt) / PIECE <= row["prompt_tokens"] <= len(prompt)
