"""The end-to-end half of bench/routing.py: one gateway process serving a vendor of one deployment
(`one`) and a vendor of three (`three`, all on the same fast fake vendor), measured round-robin at
concurrency 1 and 32: requests/s, and the gateway process's CPU time per request (from /proc, so
that the load generator and the fake vendor sharing the machine do not count)."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from bench.harness import BODY, Sample, closed_loop, cpu_seconds, start_vendor
from tests.support.fakes.server import free_port
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import sqlite_database

VARIANTS = {"1 deployment": "one", "3, least_outstanding": "three"}


async def measure(url: str, key: str, pid: int, seconds: float, rounds: int) -> None:
    headers = {"x-api-key": key}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for vendor in VARIANTS.values():  # warm up pools and code paths
            await closed_loop(session, url, {**BODY, "model": f"{vendor}/bench"}, headers, 8, 0.5, Sample())
        print(f"\nend to end: one gateway process, {rounds} rounds x {seconds}s per variant, round-robin")
        print(f"{'variant':<24}{'conc':>5}{'req/s':>9}{'p50 ms':>9}{'gateway CPU µs/req':>20}{'errors':>8}")
        for concurrency in (1, 32):
            samples = {name: Sample() for name in VARIANTS}
            cpu = dict.fromkeys(VARIANTS, 0.0)
            for _ in range(rounds):
                for name, vendor in VARIANTS.items():
                    before = cpu_seconds(pid)
                    await closed_loop(session, url, {**BODY, "model": f"{vendor}/bench"}, headers, concurrency,
                                      seconds, samples[name])
                    cpu[name] += cpu_seconds(pid) - before
            for name, s in samples.items():
                per_request = cpu[name] / max(1, len(s.latencies) + s.errors) * 1e6
                print(f"{name:<24}{concurrency:>5}{s.rps:>9.0f}{s.pct(0.5):>9.2f}{per_request:>20.1f}{s.errors:>8}")


def end_to_end(seconds: float, rounds: int) -> None:
    port = free_port()
    vendor = start_vendor(port)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        with sqlite_database() as db:
            env = {
                "GATEWAY_DATABASE_URL": db.url,
                "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
                "GATEWAY_LOG_LEVEL": "warning",
                "GATEWAY_VENDOR_ONE_PROTOCOL": "openai",
                "GATEWAY_VENDOR_ONE_BASE_URL": url,
                "GATEWAY_VENDOR_THREE_PROTOCOL": "openai",
                "GATEWAY_VENDOR_THREE_DEPLOYMENTS": json.dumps([{"base_url": url, "name": n} for n in "abc"]),
            }
            with GatewayProcess(env) as gateway:
                assert gateway.proc is not None
                asyncio.run(measure(f"{gateway.url}/v5/completions", db.key, gateway.proc.pid, seconds, rounds))
    finally:
        vendor.terminate()
        vendor.wait()
