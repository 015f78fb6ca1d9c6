"""The embedded model when a non-streamed client leaves (issue 15, D7): the generation stops, its
engine slot is free at once, and the row is `client_disconnected`, billed for what was generated."""

from __future__ import annotations

import json
import secrets
import socket
import threading

import httpx
import pytest

from tests.support.environments import LOCAL_MODEL, LOCAL_PARALLEL, LOCAL_TIMEOUT, NO_EOS, SHARED_TLS
from tests.support.processes import wait_until
from tests.support.provision import ledger_rows

pytestmark = pytest.mark.slow

LONG = {"model": LOCAL_MODEL, "prompt": "Count to a million: 1, 2,", "max_tokens": 1000, "temperature": 1,
        "logit_bias": NO_EOS}


def test_a_non_streamed_client_that_leaves_stops_its_generation_and_frees_its_slot(local_gateway, database):
    """One slot holds a long stream (our clock: it must still be generating at the end); the other
    a long non-streamed generation whose client hangs up once the stream has moved on, so that the
    generation is under way. The next small request must be answered while the stream still runs:
    the slot came back without waiting for 1000 tokens."""
    assert LOCAL_PARALLEL == 2
    headers = {"x-api-key": database.key}
    streamed = threading.Event()  # the kept stream has its first chunk
    moved_on = threading.Event()  # ... and 20 more after the non-streamed request was sent
    sent = threading.Event()
    finished = threading.Event()
    stop_reading = threading.Event()

    def keep_reading() -> None:
        with httpx.Client(base_url=local_gateway.url, headers=headers, timeout=LOCAL_TIMEOUT, verify=SHARED_TLS) as c, \
                c.stream("POST", "/v5/completions", json=LONG | {"stream": True}) as r:
            after = 0
            for line in r.iter_lines():
                streamed.set()
                after += sent.is_set()
                if after >= 20:
                    moved_on.set()
                if stop_reading.is_set():
                    return
                if line.startswith("data: {") and any(c["finish_reason"] for c in json.loads(line[6:])["choices"]):
                    finished.set()

    reader = threading.Thread(target=keep_reading)
    reader.start()
    tag = f"left-{secrets.token_hex(4)}"
    try:
        assert streamed.wait(LOCAL_TIMEOUT)
        body = json.dumps(LONG | {"user": tag}).encode()
        head = (f"POST /v5/completions HTTP/1.1\r\nhost: gateway\r\nx-api-key: {database.key}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", local_gateway.port), timeout=LOCAL_TIMEOUT) as s:
            s.sendall(head + body)
            sent.set()
            assert moved_on.wait(LOCAL_TIMEOUT)
        # Hung up. The slot it held must serve the next request while the stream still generates.
        with httpx.Client(base_url=local_gateway.url, headers=headers, timeout=LOCAL_TIMEOUT, verify=SHARED_TLS) as c:
            answer = c.post("/v5/completions", json={"model": LOCAL_MODEL, "prompt": "Hi", "max_tokens": 4,
                                                     "temperature": 0, "logit_bias": NO_EOS})
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 4
        assert not finished.is_set()
    finally:
        stop_reading.set()
        reader.join(LOCAL_TIMEOUT)
    rows = wait_until(lambda: [r for r in ledger_rows(database.url, "acct-a") if r["end_user"] == tag],
                      message="the row of the request that was left")
    (row,) = rows
    assert (row["outcome"], row["streamed"], row["estimated"]) == ("client_disconnected", False, True)
    # Billed for the tokens generated before the hang-up: some, never the 1000 asked for.
    assert 0 < row["completion_tokens"] < 1000
