"""SIGTERM: stop accepting, let in-flight streams finish, exit 0 (with several workers: every one)."""

from __future__ import annotations

import signal
import threading

import httpx
import pytest

from tests.support.bodies import chunks_of, sse_events
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import wait_until


def refuses_connections(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=5, verify=SHARED_TLS)
    except httpx.TransportError:  # refused, or closed without an answer
        return True
    return False


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_lets_active_streams_finish_then_exits_0(upstream, database, workers):
    # The held streams wait for the test, not for the vendor timeouts.
    env = gateway_env(upstream.url, database.url, GATEWAY_VENDOR_FAKE_FIRST_BYTE="60", GATEWAY_VENDOR_FAKE_IDLE="60",
                      GATEWAY_WORKERS=str(workers))
    gateway = GatewayProcess(env).start()
    results: list[httpx.Response] = []

    def stream() -> None:
        body = {"model": "fake/held", "prompt": "x", "max_tokens": 12, "stream": True}
        headers = {"x-api-key": database.key}
        url = f"{gateway.url}/v5/completions"
        results.append(httpx.post(url, json=body, headers=headers, timeout=30, verify=SHARED_TLS))

    threads = [threading.Thread(target=stream) for _ in range(3)]
    try:
        for t in threads:
            t.start()
        wait_until(lambda: upstream.holding == 3, message="three streams held mid-way at the vendor")
        gateway.proc.send_signal(signal.SIGTERM)
        # No new requests once shutting down, while the streams are still in flight.
        wait_until(lambda: refuses_connections(gateway.url), message="the gateway to stop accepting")
        assert results == [] and gateway.proc.poll() is None
        upstream.release_held()
        for t in threads:
            t.join(30)
        assert gateway.proc.wait(30) == 0
    finally:
        upstream.release_held()
        gateway.stop()
    assert len(results) == 3
    for r in results:
        assert sse_events(r.text)[-1]["data"] == "[DONE]"
        text = "".join(c["choices"][0]["text"] for c in chunks_of(r.text) if c["choices"])
        assert text == "".join(f" w{k}" for k in range(12))
