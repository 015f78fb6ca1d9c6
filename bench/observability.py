"""What metrics and JSON access logs cost per request: the same gateway three ways, side by side.

    python -m bench.observability [--seconds 4] [--rounds 4] [--pin]
    python -m bench.observability --in-process [--requests 3000] [--rounds 5] [--callgrind]

Variants, each a `gateway serve` (one process) in front of the same fast fake vendor, on one
SQLite ledger:
  off           GATEWAY_METRICS=0, log level warning (no access line)
  metrics       /metrics counting, log level warning
  metrics+text  /metrics counting, log level info: a text access line per request
  metrics+json  /metrics counting, GATEWAY_LOG_FORMAT=json at level info: a JSON access line per request

A closed-loop load generator (bench/run.py's) measures requests/s at concurrency 1 and 32,
round-robin in short rounds so machine noise hits every variant alike; each round begins with the
next variant, since where a variant stands in a round moved its figures as much as what it costs
(give --rounds a multiple of the variants' number, 4, for each to begin as often). "paired" is
the median over rounds of a variant's requests/s against off's in the same round: the machine's
drift over the run drops out of it. With --pin the gateways take turns on a core of their own, the
load generator and the vendor on the other: at concurrency 32 a gateway is then its core's only
load, and its requests/s are what a variant costs of a core's capacity. On a shared machine
requests/s move with the neighbours, so each gateway's CPU time per request (user + system, read
from /proc/<pid>/stat around its own rounds) is printed beside it: the cost the variant adds,
whatever else runs.

`--in-process` takes sockets, the vendor's server and the load generator out of the picture: each
variant is a process of its own (observability is set up once per process) that builds the app
and calls it directly as an ASGI app, `--requests` times, its vendor answering through an
in-process transport, on uvloop as `gateway serve`; what is compared is that process's CPU time per
request (the median of `--rounds` runs per variant, run alternately). The ledger writes to SQLite as in production.
With `--callgrind` each run is under valgrind and what is compared is instructions per request,
counted only while the requests are served: the same on a busy machine as on an idle one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys

import aiohttp
import uvloop

from bench import inprocess
from bench.harness import (
    BODY,
    VALGRIND,
    Sample,
    closed_loop,
    collected,
    cores_apart,
    counted,
    cpu_seconds,
    pin,
    start_vendor,
)
from tests.support.fakes.server import free_port
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import sqlite_database

VARIANTS = {
    "off": {"GATEWAY_METRICS": "0", "GATEWAY_LOG_LEVEL": "warning"},
    "metrics": {"GATEWAY_METRICS": "1", "GATEWAY_LOG_LEVEL": "warning"},
    "metrics+text": {"GATEWAY_METRICS": "1", "GATEWAY_LOG_LEVEL": "info"},
    "metrics+json": {"GATEWAY_METRICS": "1", "GATEWAY_LOG_LEVEL": "info", "GATEWAY_LOG_FORMAT": "json"},
}
async def measure(gateways: dict[str, GatewayProcess], key: str, seconds: float, rounds: int) -> None:
    headers = {"x-api-key": key}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for g in gateways.values():  # warm up pools and code paths
            await closed_loop(session, f"{g.url}/v5/completions", BODY, headers, 8, 0.5, Sample())
        print(f"\nrequests: {BODY}  ({rounds} rounds x {seconds}s per variant, round-robin)")
        print(f"{'variant':<14}{'conc':>5}{'req/s':>9}{'vs off':>8}{'paired':>8}{'p50 ms':>8}{'CPU µs/req':>12}"
              f"{'vs off':>8}{'errors':>7}")
        for concurrency in (1, 32):
            samples = {name: Sample() for name in gateways}
            cpu = dict.fromkeys(gateways, 0.0)
            rounds_rps: dict[str, list[float]] = {name: [] for name in gateways}
            names = list(gateways)
            for round_ in range(rounds):
                # Each round starts at the next variant: the first of a round was measured ~10% faster
                # than the same gateway later in the round (an "off" measured twice in one round).
                for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                    g, s = gateways[name], samples[name]
                    before, answered, spent = cpu_seconds(g.proc.pid), len(s.latencies), s.seconds
                    await closed_loop(session, f"{g.url}/v5/completions", BODY, headers, concurrency, seconds, s)
                    cpu[name] += cpu_seconds(g.proc.pid) - before
                    rounds_rps[name].append((len(s.latencies) - answered) / (s.seconds - spent))
            per_request = {name: cpu[name] / max(1, len(s.latencies)) * 1e6 for name, s in samples.items()}
            for name, s in samples.items():
                # Each round's requests/s against off's in the same round, the median of those:
                # what drifts over the run (the machine's neighbours) drops out.
                paired = statistics.median(r / off for r, off in zip(rounds_rps[name], rounds_rps["off"], strict=True))
                print(f"{name:<14}{concurrency:>5}{s.rps:>9.0f}{s.rps / samples['off'].rps:>8.3f}{paired:>8.3f}"
                      f"{s.pct(0.5):>8.2f}{per_request[name]:>12.0f}{per_request[name] / per_request['off']:>8.3f}"
                      f"{s.errors:>7}")


# -- in-process ----------------------------------------------------------------------------------
def in_process(requests: int, rounds: int, callgrind: bool) -> None:
    # Counting instructions, str hashes are the same in every run (sets and dicts then are too).
    env = {**os.environ, "PYTHONHASHSEED": "0"} if callgrind else None
    with sqlite_database() as db:
        results: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for _ in range(rounds):
            for name in VARIANTS:
                command = [sys.executable, "-m", "bench.observability", "--variant", name, "--requests", str(requests),
                           "--db", db.url, "--key", db.key] + (["--callgrind"] if callgrind else [])
                done = subprocess.run((VALGRIND if callgrind else []) + command, capture_output=True,
                                      text=True, check=True, env=env)
                if callgrind:
                    results[name].append(collected(done.stderr) / requests)
                else:
                    results[name].append(float(done.stdout.split()[-1]) * 1e6)
    unit = "instructions" if callgrind else "µs CPU"
    print(f"\nin-process: {requests} completions per run, {rounds} runs per variant, alternately; {unit} per request")
    base = statistics.median(results["off"])
    print(f"{'variant':<14}{'median':>10}{'vs off':>8}{'added':>9}   runs")
    for name, values in results.items():
        median = statistics.median(values)
        print(f"{name:<14}{median:>10.0f}{median / base:>8.3f}{median - base:>9.0f}   "
              + " ".join(f"{v:.0f}" for v in values))


def main() -> int:
    parser = argparse.ArgumentParser(description="the cost of metrics and JSON logs, side by side")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=4)  # each variant begins a round once
    parser.add_argument("--pin", action="store_true",
                        help="the gateways on the last CPU, the vendor and the load generator on the others")
    parser.add_argument("--in-process", action="store_true", help="the app called directly, CPU per request")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--callgrind", action="store_true", help="with --in-process: instructions, under valgrind")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # one in-process run (a child of --in-process)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        with contextlib.redirect_stderr(open(os.devnull, "w")):  # the variant's own log lines
            env = {"GATEWAY_DATABASE_URL": args.db, **VARIANTS[args.variant]}
            # On uvloop, as `gateway serve` runs: what the loop's own calls cost is part of the measure.
            print(uvloop.run(inprocess.drive(env, args.requests, args.key, counted if args.callgrind else None)))
        return 0
    if args.in_process:
        in_process(args.requests, args.rounds, args.callgrind)
        return 0
    vendor_port = free_port()
    vendor = start_vendor(vendor_port)
    with contextlib.ExitStack() as stack:
        db = stack.enter_context(sqlite_database())
        env = {
            "GATEWAY_DATABASE_URL": db.url,
            "GATEWAY_VENDOR_FAKE_PROTOCOL": "openai", "GATEWAY_VENDOR_FAKE_SERVER": "openai",
            "GATEWAY_VENDOR_FAKE_BASE_URL": f"http://127.0.0.1:{vendor_port}/v1",
            "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
        }
        gateways = {name: GatewayProcess({**env, **extra}) for name, extra in VARIANTS.items()}
        try:
            for g in gateways.values():
                g.start()
            if args.pin:  # every gateway on a core of its own (they take turns), the rest on the others
                own, rest = cores_apart()
                for g in gateways.values():
                    pin(g.proc.pid, own)
                pin(vendor.pid, rest)
                os.sched_setaffinity(0, rest)
            print(f"cpus: {os.cpu_count()}; one gateway process per variant; vendor: tests/support/fakes/openai_upstream.py")
            asyncio.run(measure(gateways, db.key, args.seconds, args.rounds))
        finally:
            for g in gateways.values():
                g.stop()
            vendor.terminate()
            vendor.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
