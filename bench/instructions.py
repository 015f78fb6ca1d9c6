"""`python -m bench.run --callgrind`: what a request costs the gateway, in instructions.

One `gateway serve` (one worker, SQLite ledger) runs under valgrind's callgrind, which counts
only while the measured requests are served (after a warm-up); the fake vendor and the load
generator run outside it. Cases: a non-streamed request of 16 tokens, a stream of 1 token and
one of 64 (both with include_usage), at concurrency 8. A chunk's cost is the 64-token stream's
less the 1-token stream's, per token. Counts move little with the machine's load; what they
leave out is the kernel's share (system calls), which CPU time includes.

The ledger commits on a clock (store/ledger.py COMMIT_INTERVAL): under valgrind's slowness every
request would be nearly a commit of its own, so the interval is stretched by about as much as
valgrind slows the gateway, to keep the rows per commit of a gateway at full speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import aiohttp

from bench.harness import (
    BODY,
    ENDPOINTS,
    NATIVE,
    STREAMS,
    Sample,
    checkout_python,
    one_request,
    revision,
    start_vendor,
)
from tests.support.fakes.server import free_port
from tests.support.gateway_process import ROOT
from tests.support.provision import sqlite_database

COMMIT_INTERVAL = 2.0  # seconds: the ledger's 0.05 times valgrind's slow-down, roughly
CONCURRENCY = 8
# (The stored responses' writer paces its commits as the ledger does, one worker on SQLite: stretched alike.)
BOOT = ("import sys; from gateway.store.ledger import Ledger; Ledger.COMMIT_INTERVAL = float(sys.argv[1]); "
        "from gateway.store.response_writer import ResponseWriter; ResponseWriter.COMMIT_INTERVAL = float(sys.argv[1]); "
        "from gateway.cli import main; sys.exit(main(['serve']))")
CASES = {"request (16 tokens)": (BODY, 0), "stream of 1 token": (STREAMS["1 token"][0], 1),
         "stream of 64 tokens": (STREAMS["64 tokens"][0], 64)}


def main(requests: int, against: Path | None = None) -> int:
    """`against`: another checkout of the project (one whose database schema is this one's),
    counted the same way beside this one."""
    checkouts = {"this checkout": ROOT} | ({revision(against): against.resolve()} if against else {})
    vendor_port, port = free_port(), free_port()
    vendor = start_vendor(vendor_port)
    with contextlib.ExitStack() as stack:
        db = stack.enter_context(sqlite_database())
        # (no `server` option, as in bench/run.py: checkouts before it refuse it)
        env = {"GATEWAY_DATABASE_URL": db.url, "GATEWAY_VENDOR_FAKE_PROTOCOL": "openai",
               "GATEWAY_VENDOR_FAKE_BASE_URL": f"http://127.0.0.1:{vendor_port}/v1",
               "GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_LOG_LEVEL": "warning",
               "GATEWAY_HOST": "127.0.0.1", "GATEWAY_PORT": str(port)}
        counts: dict[str, dict[str, int]] = {name: {} for name in checkouts}
        for case, (body, _) in CASES.items():  # a gateway per case: each count is of its requests alone
            for name, checkout in checkouts.items():
                counts[name][case] = _count(env, port, db.key, body, requests, checkout)
    vendor.terminate()
    vendor.wait()
    print(f"\ninstructions per request, M (callgrind; {requests} requests per case at concurrency {CONCURRENCY}, "
          "after a warm-up; one gateway serve, SQLite ledger)")
    print(f"{'':<24}" + "".join(f"{name:>16}" for name in checkouts))
    for case in CASES:
        print(f"{case:<24}" + "".join(f"{counts[name][case] / 1e6:>16.3f}" for name in checkouts))
    chunks = [(c["stream of 64 tokens"] - c["stream of 1 token"]) / 63 / 1e6 for c in counts.values()]
    print(f"{'a stream chunk':<24}" + "".join(f"{chunk:>16.3f}" for chunk in chunks)
          + "   (64-token stream less 1-token stream, per token)")
    return 0


def endpoints(requests: int) -> int:
    """`--callgrind --endpoints`: chat, bridged responses and native responses (bench/run.py
    ENDPOINTS), each non-streamed and as a 64-token stream, counted alike: the endpoints' cost
    beside each other without the machine's noise (CPU time also counts the kernel's share: the
    writers' fsyncs)."""
    vendor_port, port = free_port(), free_port()
    vendor = start_vendor(vendor_port)
    counts: dict[str, list[int]] = {}
    with sqlite_database() as db:
        vendor_url = f"http://127.0.0.1:{vendor_port}/v1"
        env = {"GATEWAY_DATABASE_URL": db.url, "GATEWAY_VENDOR_FAKE_PROTOCOL": "openai",
               "GATEWAY_VENDOR_FAKE_BASE_URL": vendor_url, "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
               "GATEWAY_LOG_LEVEL": "warning", "GATEWAY_HOST": "127.0.0.1", "GATEWAY_PORT": str(port),
               **NATIVE, "GATEWAY_VENDOR_NATIVE_BASE_URL": vendor_url}
        for name, (path, plain, streamed) in ENDPOINTS.items():
            counts[name] = [_count(env, port, db.key, body, requests, ROOT, path) for body in (plain, streamed)]
    vendor.terminate()
    vendor.wait()
    print(f"\ninstructions per request, M (callgrind; {requests} requests per case at concurrency {CONCURRENCY}, "
          "after a warm-up; one gateway serve, SQLite)")
    print(f"{'endpoint':<12}{'plain':>10}{'of chat':>9}{'64-token stream':>17}{'of chat':>9}")
    chat = counts["chat"]
    for name, (plain, streamed) in counts.items():
        print(f"{name:<12}{plain / 1e6:>10.3f}{plain / chat[0]:>8.2f}x{streamed / 1e6:>17.3f}{streamed / chat[1]:>8.2f}x")
    return 0


def _count(env: dict[str, str], port: int, key: str, body: dict, requests: int, checkout: Path,
           path: str = "/v5/completions") -> int:
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
               checkout_python(checkout), "-c", BOOT, str(COMMIT_INTERVAL)]
    # Run from `checkout`, its code is the one imported (the script's directory comes first).
    gateway = subprocess.Popen(command, env={**os.environ, **env}, cwd=checkout, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        asyncio.run(_serve_requests(gateway, port, key, body, requests, path))
    finally:
        gateway.send_signal(signal.SIGTERM)
        _, err = gateway.communicate(timeout=300)
    collected = [line for line in err.splitlines() if "Collected :" in line]
    return int(collected[-1].split()[-1]) // requests


async def _serve_requests(gateway: subprocess.Popen, port: int, key: str, body: dict, requests: int,
                          path: str) -> None:
    url, headers = f"http://127.0.0.1:{port}", {"x-api-key": key}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        deadline = time.monotonic() + 300
        while True:  # valgrind takes a while to start a gateway
            if gateway.poll() is not None:
                raise RuntimeError(f"the gateway under valgrind exited: {gateway.stderr.read()[-2000:]}")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"{url}/readyz") as ready:
                    if ready.status == 200:
                        break
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway under valgrind did not start")
            await asyncio.sleep(0.5)
        await _exactly(session, f"{url}{path}", body, headers, max(50, requests // 4))  # warm-up
        subprocess.run(["callgrind_control", "-i", "on", str(gateway.pid)], check=True, capture_output=True)
        await _exactly(session, f"{url}{path}", body, headers, requests)
        subprocess.run(["callgrind_control", "-i", "off", str(gateway.pid)], check=True, capture_output=True)


async def _exactly(session: aiohttp.ClientSession, url: str, body: dict, headers: dict, requests: int) -> None:
    """`requests` requests, CONCURRENCY at a time, every one of them answered."""
    left = requests

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            sample = Sample()
            await one_request(session, url, body, headers, sample)
            if sample.errors:
                raise RuntimeError(f"a request to the gateway under valgrind failed: {body}")

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
