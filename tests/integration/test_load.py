"""A bounded load test on loopback: 200 concurrent clients, each sending requests back to back for
GATEWAY_TEST_LOAD_SECONDS (SECONDS below; the issue's 30 with GATEWAY_TEST_LOAD_SECONDS=30) and at
least two, mixed plain and streamed, on each database, to a gateway of one worker and of two. No
unexpected error, and exactly one ledger row per request whose token sums match what the clients
were told."""

from __future__ import annotations

import asyncio
import json
import os
import time

import aiohttp
import pytest

from tests.support.cli import fresh_account
from tests.support.environments import gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import create_key, ledger_rows

CLIENTS = 200
PER_CLIENT = 2  # at least: one plain and one streamed request from every client, however slow the machine
SECONDS = float(os.environ.get("GATEWAY_TEST_LOAD_SECONDS", "2"))


async def drive(url: str, key: str, seconds: float) -> tuple[list[tuple[int, int]], list[str]]:
    """Each client sends requests back to back until time is up (and at least PER_CLIENT). Returns
    the usage every answer reported (prompt, completion) and every unexpected outcome."""
    told: list[tuple[int, int]] = []
    errors: list[str] = []
    stop_at = time.monotonic() + seconds

    async def client(number: int, session: aiohttp.ClientSession) -> None:
        i = 0
        while i < PER_CLIENT or time.monotonic() < stop_at:
            i += 1
            stream = (number + i) % 2 == 0
            body = {"model": "fake/load", "prompt": "w " * (1 + i % 5), "max_tokens": 1 + (number + i) % 8,
                    "stream": stream, **({"stream_options": {"include_usage": True}} if stream else {})}
            try:
                async with session.post(f"{url}/v5/completions", json=body, headers={"x-api-key": key}) as r:
                    text = await r.text()
                    if r.status != 200:
                        errors.append(f"{r.status}: {text[:200]}")
                        continue
                    if stream:
                        events = [line[6:] for line in text.split("\n") if line.startswith("data: {")]
                        usage = json.loads(events[-1])["usage"]
                        if not text.endswith("event: done\ndata: [DONE]\n\n") or '"error"' in text:
                            errors.append(f"stream did not end cleanly: {text[-200:]}")
                    else:
                        usage = json.loads(text)["usage"]
                    told.append((usage["prompt_tokens"], usage["completion_tokens"]))
            except aiohttp.ClientError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        await asyncio.gather(*(client(n, session) for n in range(CLIENTS)))
    return told, errors


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_200_concurrent_clients_mixed_streaming_lose_nothing(upstream, backend, workers):
    account = fresh_account()
    key = create_key(backend.url, account)
    # The fake vendor answers from this process, which also runs the 200 clients: on a busy machine
    # its first byte can take longer than the suite's usual vendor timeouts, which this test is not
    # about (they are a safety net here).
    env = gateway_env(upstream.url, backend.url, GATEWAY_VALIDATE_RESPONSES="0", GATEWAY_WORKERS=str(workers),
                      GATEWAY_VENDOR_FAKE_FIRST_BYTE="30", GATEWAY_VENDOR_FAKE_IDLE="30")
    with GatewayProcess(env) as gateway:
        told, errors = asyncio.run(drive(gateway.url, key, SECONDS))
    # The gateway has stopped (SIGTERM): every row it owed, in every worker, is written.
    print(f"\n{backend.url.split(':')[0]}, {workers} workers: {len(told)} requests in {SECONDS:g}s "
          f"({len(told) / SECONDS:.0f}/s), {len(errors)} errors")
    assert errors == []
    assert len(told) >= CLIENTS * PER_CLIENT  # every client completed requests, several each
    rows = ledger_rows(backend.url, account)
    assert len(rows) == len(told)
    assert len({row["request_id"] for row in rows}) == len(rows)
    assert all(row["outcome"] == "completed" and not row["estimated"] for row in rows)
    assert sum(row["prompt_tokens"] for row in rows) == sum(p for p, _ in told)
    assert sum(row["completion_tokens"] for row in rows) == sum(c for _, c in told)
