"""SIGTERM: stop accepting, let in-flight streams finish, exit 0."""

from __future__ import annotations

import signal
import threading
import time

import httpx

from tests.gateway_process import GatewayProcess
from tests.support import chunks_of, gateway_env, sse_events


def test_sigterm_lets_active_streams_finish_then_exits_0(upstream, database):
    gateway = GatewayProcess(gateway_env(upstream.url, database.url, GATEWAY_VENDOR_FAKE_IDLE="5")).start()
    results: list[httpx.Response] = []

    def stream() -> None:
        body = {"model": "fake/slow-100", "prompt": "x", "max_tokens": 12, "stream": True}
        headers = {"x-api-key": database.key}
        results.append(httpx.post(f"{gateway.url}/v5/completions", json=body, headers=headers, timeout=30))

    threads = [threading.Thread(target=stream) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while upstream.open_streams < 3:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    gateway.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    try:  # no new requests once shutting down
        httpx.get(f"{gateway.url}/healthz", timeout=1)
        accepted = True
    except httpx.HTTPError:
        accepted = False
    for t in threads:
        t.join(30)
    assert gateway.proc.wait(30) == 0
    gateway.stop()
    assert not accepted
    assert len(results) == 3
    for r in results:
        assert sse_events(r.text)[-1]["data"] == "[DONE]"
        text = "".join(c["choices"][0]["text"] for c in chunks_of(r.text) if c["choices"])
        assert text == "".join(f" w{k}" for k in range(12))
