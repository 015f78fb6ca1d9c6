"""`make bench`: the gateway against the vendor it fronts, measured side by side in one run.

A fast fake OpenAI-compatible vendor runs in its own process; gateways (one per HTTP transport:
httpx-aiohttp and plain httpx) run as `gateway serve`, one worker each. A closed-loop load
generator (aiohttp, in this process) measures requests/s and latency p50/p99 at concurrency 1
and 32, calling the vendor directly and through each gateway, round-robin in short rounds so
machine noise hits every variant alike; then streaming time-to-first-byte and total time.

    python -m bench.run [--seconds 4] [--rounds 3] [--against CHECKOUT]

`--against` adds the gateway of another checkout of this project (e.g. a worktree of the commit
before a change) as one more variant, on its own SQLite database: before and after, in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from tests.fakes.server import free_port
from tests.gateway_process import ROOT, GatewayProcess
from tests.provision import empty_database, sqlite_database

BODY = {"model": "fake/bench", "prompt": "The quick brown fox", "max_tokens": 16}
STREAM_BODY = {**BODY, "max_tokens": 64, "stream": True}


@dataclass
class Sample:
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0
    errors: int = 0

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        data = sorted(self.latencies)
        return data[min(len(data) - 1, int(q * len(data)))] * 1000 if data else float("nan")


async def closed_loop(session: aiohttp.ClientSession, url: str, body: dict, headers: dict, concurrency: int,
                      seconds: float, sample: Sample) -> None:
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            try:
                async with session.post(url, json=body, headers=headers) as response:
                    await response.read()
                    ok = response.status == 200
            except aiohttp.ClientError:
                ok = False
            if ok:
                sample.latencies.append(time.perf_counter() - start)
            else:
                sample.errors += 1

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    sample.seconds += time.perf_counter() - began


async def stream_once(session: aiohttp.ClientSession, url: str, headers: dict) -> tuple[float, float]:
    start = time.perf_counter()
    first = None
    async with session.post(url, json=STREAM_BODY, headers=headers) as response:
        async for line in response.content:
            if first is None and line.startswith(b"data: {"):
                first = time.perf_counter() - start
    return first or float("nan"), time.perf_counter() - start


def start_vendor(port: int) -> subprocess.Popen:
    code = ("import uvicorn; from tests.fakes.openai_upstream import FakeOpenAI; "
            f"uvicorn.run(FakeOpenAI(), host='127.0.0.1', port={port}, log_level='warning', "
            "loop='uvloop', http='httptools', access_log=False)")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    deadline = time.monotonic() + 10
    import socket

    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.05)
    raise RuntimeError("vendor did not start")


async def measure(targets: dict[str, tuple[str, dict]], seconds: float, rounds: int) -> None:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        for url, headers in targets.values():  # warm up pools and code paths
            await closed_loop(session, url, BODY, headers, 8, 0.5, Sample())
        print(f"\nrequests: {BODY}  ({rounds} rounds x {seconds}s per variant, round-robin)")
        print(f"{'variant':<22}{'conc':>5}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
        for concurrency in (1, 32):
            samples = {name: Sample() for name in targets}
            for _ in range(rounds):
                for name, (url, headers) in targets.items():
                    await closed_loop(session, url, BODY, headers, concurrency, seconds, samples[name])
            for name, s in samples.items():
                print(f"{name:<22}{concurrency:>5}{s.rps:>10.0f}{s.pct(0.5):>9.2f}{s.pct(0.99):>9.2f}{s.errors:>8}")
            direct = samples["direct"]
            for name, s in samples.items():
                if name != "direct":
                    print(f"  {name}: {s.rps / direct.rps:.2f}x direct throughput, "
                          f"+{s.pct(0.5) - direct.pct(0.5):.2f} ms p50, +{s.pct(0.99) - direct.pct(0.99):.2f} ms p99")
        print(f"\nstreaming {STREAM_BODY['max_tokens']} tokens, sequential, 50 per variant (median):")
        print(f"{'variant':<22}{'ttfb ms':>9}{'total ms':>10}")
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in targets}
        for _ in range(50):
            for name, (url, headers) in targets.items():
                results[name].append(await stream_once(session, url, headers))
        for name, values in results.items():
            ttfb = statistics.median(v[0] for v in values) * 1000
            total = statistics.median(v[1] for v in values) * 1000
            print(f"{name:<22}{ttfb:>9.2f}{total:>10.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description="gateway vs direct vendor, side by side")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout's gateway, measured beside this one")
    args = parser.parse_args()
    vendor_port = free_port()
    vendor = start_vendor(vendor_port)
    vendor_url = f"http://127.0.0.1:{vendor_port}"
    database = contextlib.ExitStack()
    db = database.enter_context(sqlite_database())  # both gateways write their ledger rows to it
    env = {
        "GATEWAY_DATABASE_URL": db.url,
        "GATEWAY_VENDOR_FAKE_PROTOCOL": "openai",
        "GATEWAY_VENDOR_FAKE_BASE_URL": f"{vendor_url}/v1",
        "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
        "GATEWAY_LOG_LEVEL": "warning",
    }
    gateways = {f"gateway ({t})": GatewayProcess({**env, "GATEWAY_HTTP_TRANSPORT": t}) for t in ("aiohttp", "httpx")}
    keys = {name: db.key for name in gateways}
    if args.against:
        # Its own database, empty: the other checkout's schema may differ; it makes its first key.
        other_url = database.enter_context(empty_database("sqlite"))
        name = f"{_revision(args.against)} (aiohttp)"
        gateways[name] = GatewayProcess({**env, "GATEWAY_DATABASE_URL": other_url, "GATEWAY_HTTP_TRANSPORT": "aiohttp"},
                                        cwd=args.against.resolve())
    try:
        for g in gateways.values():
            g.start()
        if args.against:
            keys[name] = re.search(r"sk-gw-[A-Za-z0-9_-]+", gateways[name].log()).group()
        targets = {"direct": (f"{vendor_url}/v1/completions", {})}
        for name, g in gateways.items():
            targets[name] = (f"{g.url}/v5/completions", {"x-api-key": keys[name]})
        print(f"cpus: {os.cpu_count()}; one gateway worker per transport; vendor: tests/fakes/openai_upstream.py")
        asyncio.run(measure(targets, args.seconds, args.rounds))
    finally:
        for g in gateways.values():
            g.stop()
        vendor.terminate()
        vendor.wait()
        database.close()
    return 0


def _revision(checkout: Path) -> str:
    found = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() or checkout.name


if __name__ == "__main__":
    sys.exit(main())
