"""What metrics and JSON access logs cost per request: the same gateway three ways, side by side.

    python -m bench.observability [--seconds 4] [--rounds 3]

Variants, each a `gateway serve` (one process) in front of the same fast fake vendor, on one
SQLite ledger:
  off           GATEWAY_METRICS=0, log level warning (no access line)
  metrics       /metrics counting, log level warning
  metrics+json  /metrics counting, GATEWAY_LOG_FORMAT=json at level info: an access line per request

A closed-loop load generator (bench/run.py's) measures requests/s at concurrency 1 and 32,
round-robin in short rounds so machine noise hits every variant alike. On a shared machine
requests/s move with the neighbours, so each gateway's CPU time per request (user + system, read
from /proc/<pid>/stat around its own rounds) is printed beside it: the cost the variant adds,
whatever else runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys

import aiohttp

from bench.run import BODY, Sample, closed_loop, start_vendor
from tests.fakes.server import free_port
from tests.gateway_process import GatewayProcess
from tests.provision import sqlite_database

VARIANTS = {
    "off": {"GATEWAY_METRICS": "0", "GATEWAY_LOG_LEVEL": "warning"},
    "metrics": {"GATEWAY_METRICS": "1", "GATEWAY_LOG_LEVEL": "warning"},
    "metrics+json": {"GATEWAY_METRICS": "1", "GATEWAY_LOG_LEVEL": "info", "GATEWAY_LOG_FORMAT": "json"},
}
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15 of stat)


async def measure(gateways: dict[str, GatewayProcess], key: str, seconds: float, rounds: int) -> None:
    headers = {"x-api-key": key}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for g in gateways.values():  # warm up pools and code paths
            await closed_loop(session, f"{g.url}/v5/completions", BODY, headers, 8, 0.5, Sample())
        print(f"\nrequests: {BODY}  ({rounds} rounds x {seconds}s per variant, round-robin)")
        print(f"{'variant':<14}{'conc':>5}{'req/s':>9}{'vs off':>8}{'p50 ms':>8}{'CPU µs/req':>12}{'vs off':>8}{'errors':>7}")
        for concurrency in (1, 32):
            samples = {name: Sample() for name in gateways}
            cpu = dict.fromkeys(gateways, 0.0)
            for _ in range(rounds):
                for name, g in gateways.items():
                    before = cpu_seconds(g.proc.pid)
                    await closed_loop(session, f"{g.url}/v5/completions", BODY, headers, concurrency, seconds,
                                      samples[name])
                    cpu[name] += cpu_seconds(g.proc.pid) - before
            per_request = {name: cpu[name] / max(1, len(s.latencies)) * 1e6 for name, s in samples.items()}
            for name, s in samples.items():
                print(f"{name:<14}{concurrency:>5}{s.rps:>9.0f}{s.rps / samples['off'].rps:>8.3f}{s.pct(0.5):>8.2f}"
                      f"{per_request[name]:>12.0f}{per_request[name] / per_request['off']:>8.3f}{s.errors:>7}")


def main() -> int:
    parser = argparse.ArgumentParser(description="the cost of metrics and JSON logs, side by side")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    vendor_port = free_port()
    vendor = start_vendor(vendor_port)
    with contextlib.ExitStack() as stack:
        db = stack.enter_context(sqlite_database())
        env = {
            "GATEWAY_DATABASE_URL": db.url,
            "GATEWAY_VENDOR_FAKE_PROTOCOL": "openai",
            "GATEWAY_VENDOR_FAKE_BASE_URL": f"http://127.0.0.1:{vendor_port}/v1",
            "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
        }
        gateways = {name: GatewayProcess({**env, **extra}) for name, extra in VARIANTS.items()}
        try:
            for g in gateways.values():
                g.start()
            print(f"cpus: {os.cpu_count()}; one gateway process per variant; vendor: tests/fakes/openai_upstream.py")
            asyncio.run(measure(gateways, db.key, args.seconds, args.rounds))
        finally:
            for g in gateways.values():
                g.stop()
            vendor.terminate()
            vendor.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
