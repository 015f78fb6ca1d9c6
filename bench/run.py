"""`make bench`: the gateway against the vendor it fronts, measured side by side in one run.

A fast fake OpenAI-compatible vendor runs in its own process; the gateway runs as `gateway serve`,
one worker (and, with --against, another checkout's gateway beside it). A closed-loop load
generator (aiohttp, in this process) measures, calling the vendor directly and through each
gateway, round-robin in short rounds so machine noise hits every variant alike:
- requests/s and latency p50/p99 at concurrency 1 and 32, and each gateway's CPU per request
  (user + system time of its process during its own rounds);
- streams at concurrency 32: 64 tokens as fast as the vendor writes them (a read of the vendor
  holds many events), 1 token (what a stream costs apart from its chunks), and 64 tokens paced
  at 1 ms a token (a read holds one event, as from a generating model): streams/s, time to the
  first event p50, CPU per stream, and CPU per chunk (the 64-token stream's CPU less the
  1-token one's, per token);
- then sequential streams: time to the first event and total time.

    python -m bench.run [--seconds 4] [--rounds 3] [--against CHECKOUT]
    python -m bench.run --callgrind [--requests 300] [--against CHECKOUT]
    python -m bench.run --endpoints [--seconds 4] [--rounds 3] [--workers N]
    python -m bench.run --callgrind --endpoints [--requests 300]

`--endpoints` measures the endpoints side by side instead, on the same fake vendor through one
gateway: chat (`/v5/chat/completions`), responses (`/v5/responses`, bridged through chat) and
native (`/v5/responses` on the same fake named as OpenAI's own server: its Responses API),
non-streamed at concurrency 1 and 32 and 64-token streams at 32, each with the gateway's CPU per
request (docs/performance.md); `--workers N` runs the gateway with N workers (its stored responses
then answered once committed, for the other workers: store/response_writer.py).

`--against` adds the gateway of another checkout of this project (e.g. a worktree of the commit
before a change) as one more variant, on its own SQLite database: before and after, in one run.
`--callgrind` counts instructions instead (bench/instructions.py): the same on a busy machine as
on an idle one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import sys
import time
from pathlib import Path

import aiohttp

from bench.harness import (
    BODY,
    ENDPOINTS,
    NATIVE,
    STREAM_BODY,
    STREAMS,
    Sample,
    checkout_python,
    closed_loop,
    cpu_seconds,
    revision,
    start_vendor,
)
from tests.support.fakes.server import free_port
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import empty_database, sqlite_database


async def stream_once(session: aiohttp.ClientSession, url: str, headers: dict) -> tuple[float, float]:
    start = time.perf_counter()
    first = None
    async with session.post(url, json=STREAM_BODY, headers=headers) as response:
        async for line in response.content:
            if first is None and line.startswith(b"data: {"):
                first = time.perf_counter() - start
    return first or float("nan"), time.perf_counter() - start


Target = tuple[str, dict, int | None]  # URL, headers, the gateway's process id (None: the vendor)


async def rounds(session: aiohttp.ClientSession, targets: dict[str, Target], body: dict, concurrency: int,
                 seconds: float, count: int) -> dict[str, Sample]:
    """`count` rounds of `seconds` per target, round-robin; each gateway's CPU during its own."""
    samples = {name: Sample() for name in targets}
    direct = {**body, "model": body["model"].partition("/")[2]}  # the vendor's own name for it
    for _ in range(count):
        for name, (url, headers, pid) in targets.items():
            before = cpu_seconds(pid)
            await closed_loop(session, url, body if pid else direct, headers, concurrency, seconds, samples[name])
            samples[name].cpu += cpu_seconds(pid) - before
    return samples


async def measure(targets: dict[str, Target], seconds: float, count: int) -> None:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        for url, headers, _ in targets.values():  # warm up pools and code paths
            await closed_loop(session, url, BODY, headers, 8, 0.5, Sample())
            await closed_loop(session, url, STREAMS["64 tokens"][0], headers, 8, 0.5, Sample())
        print(f"\nrequests: {BODY}  ({count} rounds x {seconds}s per variant, round-robin)")
        print(f"{'variant':<22}{'conc':>5}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'CPU ms/req':>12}{'errors':>8}")
        for concurrency in (1, 32):
            samples = await rounds(session, targets, BODY, concurrency, seconds, count)
            for name, s in samples.items():
                cpu = f"{s.cpu_per_request:>12.3f}" if targets[name][2] else f"{'':>12}"
                print(f"{name:<22}{concurrency:>5}{s.rps:>10.0f}{s.pct(0.5):>9.2f}{s.pct(0.99):>9.2f}{cpu}{s.errors:>8}")
            direct = samples["direct"]
            for name, s in samples.items():
                if name != "direct":
                    print(f"  {name}: {s.rps / direct.rps:.2f}x direct throughput, "
                          f"+{s.pct(0.5) - direct.pct(0.5):.2f} ms p50, +{s.pct(0.99) - direct.pct(0.99):.2f} ms p99")
        print(f"\nstreams at concurrency 32, include_usage ({count} rounds x {seconds}s per variant, round-robin); "
              "first event p50; CPU per chunk = (64-token stream - 1-token stream) / 63")
        print(f"{'variant':<22}{'stream':>10}{'streams/s':>11}{'1st ms':>9}{'CPU ms':>9}{'CPU µs/chunk':>14}{'errors':>8}")
        by_stream = {stream: await rounds(session, targets, body, 32, seconds, count)
                     for stream, (body, _) in STREAMS.items()}
        for name in targets:
            one = by_stream["1 token"][name].cpu_per_request
            for stream, samples in by_stream.items():
                s, tokens = samples[name], STREAMS[stream][1]
                per_chunk = (s.cpu_per_request - one) / (tokens - 1) * 1000 if tokens > 1 else float("nan")
                cpu = f"{s.cpu_per_request:>9.3f}{per_chunk:>14.1f}" if targets[name][2] else f"{'':>23}"
                print(f"{name:<22}{stream:>10}{s.rps:>11.0f}{s.pct(0.5, 'first_bytes'):>9.2f}{cpu}{s.errors:>8}")
        print(f"\nstreaming {STREAM_BODY['max_tokens']} tokens, sequential, 50 per variant (median):")
        print(f"{'variant':<22}{'ttfb ms':>9}{'total ms':>10}")
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in targets}
        for _ in range(50):
            for name, (url, headers, _) in targets.items():
                results[name].append(await stream_once(session, url, headers))
        for name, values in results.items():
            ttfb = statistics.median(v[0] for v in values) * 1000
            total = statistics.median(v[1] for v in values) * 1000
            print(f"{name:<22}{ttfb:>9.2f}{total:>10.2f}")


async def measure_endpoints(url: str, key: str, pid: int, seconds: float, count: int, workers: int) -> None:
    """Each endpoint through one gateway, round-robin in rounds: req/s, p50/p99, CPU per request
    (its workers' too when it has several)."""
    headers = {"x-api-key": key}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        for path, plain, streamed in ENDPOINTS.values():  # warm up pools and code paths
            await closed_loop(session, url + path, plain, headers, 8, 0.5, Sample())
            await closed_loop(session, url + path, streamed, headers, 8, 0.5, Sample())
        print(f"\nendpoints through one gateway ({count} rounds x {seconds}s per variant, round-robin)")
        print(f"{'endpoint':<12}{'case':<14}{'conc':>5}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'CPU ms/req':>12}"
              f"{'errors':>8}")
        for case, concurrency, which in (("plain", 1, 1), ("plain", 32, 1), ("64-token", 32, 2)):
            samples = {name: Sample() for name in ENDPOINTS}
            for _ in range(count):
                for name, spec in ENDPOINTS.items():
                    before = cpu_seconds(pid, workers > 1)
                    await closed_loop(session, url + spec[0], spec[which], headers, concurrency, seconds,
                                      samples[name])
                    samples[name].cpu += cpu_seconds(pid, workers > 1) - before
            for name, s in samples.items():
                print(f"{name:<12}{case:<14}{concurrency:>5}{s.rps:>10.0f}{s.pct(0.5):>9.2f}{s.pct(0.99):>9.2f}"
                      f"{s.cpu_per_request:>12.3f}{s.errors:>8}")
            chat = samples["chat"].cpu_per_request
            print("  CPU per request, of chat's: " + ", ".join(
                f"{name} {samples[name].cpu_per_request / chat:.2f}x" for name in ENDPOINTS if name != "chat"))


def main() -> int:
    parser = argparse.ArgumentParser(description="gateway vs direct vendor, side by side")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout's gateway, measured beside this one")
    parser.add_argument("--callgrind", action="store_true", help="instructions per request, under valgrind")
    parser.add_argument("--requests", type=int, default=300, help="with --callgrind: requests per case")
    parser.add_argument("--endpoints", action="store_true", help="chat and responses side by side, one gateway")
    parser.add_argument("--workers", type=int, default=1, help="with --endpoints: the gateway's worker processes")
    args = parser.parse_args()
    if args.callgrind:
        from bench import instructions

        if args.endpoints:
            return instructions.endpoints(args.requests)
        return instructions.main(args.requests, args.against)
    vendor_port = free_port()
    vendor = start_vendor(vendor_port)
    vendor_url = f"http://127.0.0.1:{vendor_port}"
    database = contextlib.ExitStack()
    db = database.enter_context(sqlite_database())  # both gateways write their ledger rows to it
    env = {
        "GATEWAY_DATABASE_URL": db.url,
        # (no `server` option, which checkouts before it refuse: the fake is served as unidentified,
        # which serves the bench's one-prompt request as OpenAI's would be)
        "GATEWAY_VENDOR_FAKE_PROTOCOL": "openai",
        "GATEWAY_VENDOR_FAKE_BASE_URL": f"{vendor_url}/v1",
        "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
        "GATEWAY_LOG_LEVEL": "warning",
    }
    if args.endpoints:
        env |= NATIVE | {"GATEWAY_VENDOR_NATIVE_BASE_URL": f"{vendor_url}/v1", "GATEWAY_WORKERS": str(args.workers)}
    gateways = {"gateway": GatewayProcess(env)}
    keys = {name: db.key for name in gateways}
    if args.against:
        # Its own database, empty: the other checkout's schema may differ; it makes its first key.
        other_url = database.enter_context(empty_database("sqlite"))
        name = revision(args.against)
        gateways[name] = GatewayProcess({**env, "GATEWAY_DATABASE_URL": other_url},
                                        cwd=args.against.resolve(), python=checkout_python(args.against))
    try:
        for g in gateways.values():
            g.start()
        if args.against:
            keys[name] = re.search(r"sk-gw-[A-Za-z0-9_-]+", gateways[name].log()).group()
        targets: dict[str, Target] = {"direct": (f"{vendor_url}/v1/completions", {}, None)}
        for name, g in gateways.items():
            assert g.proc is not None
            targets[name] = (f"{g.url}/v5/completions", {"x-api-key": keys[name]}, g.proc.pid)
        print(f"cpus: {os.cpu_count()}; one worker per gateway; vendor: tests/support/fakes/openai_upstream.py")
        if args.endpoints:
            url, headers, pid = targets["gateway"]
            asyncio.run(measure_endpoints(url.removesuffix("/v5/completions"), headers["x-api-key"], pid or 0,
                                          args.seconds, args.rounds, args.workers))
            return 0
        asyncio.run(measure(targets, args.seconds, args.rounds))
    finally:
        for g in gateways.values():
            g.stop()
        vendor.terminate()
        vendor.wait()
        database.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
