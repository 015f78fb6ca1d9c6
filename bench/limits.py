"""What limits and workers cost and give, measured side by side in one run (not a test).

1. The limiter in-process: CPU time per request (admit + settle) with no limits, with limits
   counted in memory, and with limits counted in Redis on loopback (rpm, tpm, concurrency and a
   token budget on the key, rpm on its account: the Lua scripts' every branch, two round trips),
   and with a key's rpm alone in Redis (one round trip: nothing to settle). The Redis server's own CPU is not
   the gateway's and is not counted.
2. A real gateway (`gateway serve`, one worker, Redis on loopback) in front of the fast fake
   vendor: its CPU time per request (from /proc) for a key with those limits and for a key
   without, in alternating rounds at concurrency 1.
3. Requests per second at concurrency 32 of `gateway serve --workers 2` against `--workers 1`,
   round-robin rounds (the load generator shares the machine's cores with the gateways).

    python -m bench.limits [--seconds 3] [--rounds 3] [--redis redis://127.0.0.1:6379/0]
    python -m bench.limits --in-process [--callgrind] [--requests 5000] [--rounds 3]   # part 1 only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

import aiohttp
import uvloop

from bench.run import BODY, Sample, closed_loop, start_vendor
from gateway.store.counters import BudgetClaim, Charge, Claim, MemoryCounters
from gateway.store.counters_redis import RedisCounters
from gateway.store.limiter import Limiter
from gateway.store.limits import ACCOUNT, KEY, TOKENS, Budget, Limits, Subject
from tests.fakes.server import free_port
from tests.gateway_process import GatewayProcess
from tests.provision import new_key, run_cli, sqlite_database
from tests.support import redis_prefix, remove_redis_keys

LIMITS = Limits(rpm=10**9, tpm=10**12, concurrent=10**6, budgets=(Budget(TOKENS, 10**15, "month"),))
ROW = {"total_tokens": 20}


class _Table:
    """A LimitsTable's part the limiter reads on the request path."""

    def __init__(self, subjects: dict[Subject, Limits]) -> None:
        self.subjects = subjects
        self.on_change = None


async def limiter_cost(counters, subjects: dict[Subject, Limits], requests: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per admit + settle, requests one after the other (concurrency 1)."""
    limiter = Limiter(_Table(subjects), counters, engine=None)  # budgets are seeded (_seed), not from a ledger
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(requests):
        grant = await limiter.admit(key_id="key_bench", account="acct", model="fake/m", prompt_tokens=4,
                                    completion_tokens=16, request_id=f"r{i}")
        grant.settle(ROW)  # as in the gateway, the request does not wait for its settlement to be answered
    await limiter.drain()  # but every one is answered before the clock stops
    return (time.process_time() - cpu) / requests * 1e6, (time.perf_counter() - wall) / requests * 1e6


LIMITED = {Subject(KEY, "key_bench"): LIMITS, Subject(ACCOUNT, "acct"): Limits(rpm=10**9)}
# The variants of part 1: (store, the subjects' limits). A key's rpm alone has nothing to settle.
VARIANTS = {
    "no limits": ("memory", {}),
    "limits, memory": ("memory", LIMITED),
    "limits, redis": ("redis", LIMITED),
    "rpm only, redis": ("redis", {Subject(KEY, "key_bench"): Limits(rpm=10**9)}),
}


async def _stores(redis_url: str, prefix: str) -> dict:
    stores = {"memory": MemoryCounters(), "redis": RedisCounters(redis_url, prefix)}
    for store in stores.values():  # a budget counter starts from the ledger; here from a seed
        await _seed(store, LIMITED)
        await limiter_cost(store, LIMITED, 200)  # warm
    return stores


def part_limiter(redis_url: str, requests: int, rounds: int) -> None:
    prefix = redis_prefix()

    async def measure() -> dict[str, list[tuple[float, float]]]:
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
        stores = await _stores(redis_url, prefix)
        try:
            for _ in range(rounds):
                for name, (store, subjects) in VARIANTS.items():
                    results[name].append(await limiter_cost(stores[store], subjects, requests))
        finally:
            await stores["redis"].close()
        return results

    try:
        results = uvloop.run(measure())  # the gateway's loop
    finally:
        remove_redis_keys(prefix, redis_url)
    print(f"\n1. the limiter in-process, {requests} requests x {rounds} rounds (median; best), admit + settle:")
    print(f"{'variant':<18}{'CPU µs':>9}{'best':>8}{'wall µs':>10}")
    base = statistics.median(c for c, _ in results["no limits"])
    for name, values in results.items():
        cpu, wall = statistics.median(c for c, _ in values), statistics.median(w for _, w in values)
        best = min(c for c, _ in values)
        print(f"{name:<18}{cpu:>9.1f}{best:>8.1f}{wall:>10.1f}   (+{cpu - base:.1f} µs CPU)")


def _counting(on: bool) -> None:
    """Count instructions from now on (or stop): this process runs under valgrind's callgrind."""
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], capture_output=True,
                   check=True)


def one_variant(name: str, redis_url: str, prefix: str, requests: int) -> None:
    """A child of `part_limiter_callgrind`: variant `name` alone, under valgrind."""
    store_name, subjects = VARIANTS[name]

    async def run() -> None:
        stores = await _stores(redis_url, prefix)
        _counting(True)
        await limiter_cost(stores[store_name], subjects, requests)
        _counting(False)
        await stores["redis"].close()

    uvloop.run(run())


def part_limiter_callgrind(redis_url: str, requests: int, rounds: int) -> None:
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null"]
    prefix = redis_prefix()
    results: dict[str, list[float]] = {name: [] for name in VARIANTS}
    try:
        for _ in range(rounds):
            for name in VARIANTS:
                command = [*valgrind, sys.executable, "-m", "bench.limits", "--variant", name, "--requests",
                           str(requests), "--redis", redis_url, "--prefix", prefix]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                collected = [line for line in done.stderr.splitlines() if "Collected :" in line][-1]
                results[name].append(int(collected.split()[-1]) / requests)
    finally:
        remove_redis_keys(prefix, redis_url)
    print(f"\n1. the limiter in-process under callgrind, {requests} requests x {rounds} runs (median), "
          "admit + settle, instructions per request (user space):")
    base = statistics.median(results["no limits"])
    for name, values in results.items():
        median = statistics.median(values)
        print(f"{name:<18}{median:>10.0f}   (+{median - base:.0f})   runs: " + " ".join(f"{v:.0f}" for v in values))


async def _seed(store, subjects: dict[Subject, Limits]) -> None:
    now = time.time()
    charges = [Charge(s, lim, [BudgetClaim(b, b.period_at(now), 0, seed=0) for b in lim.budgets])
               for s, lim in subjects.items()]
    verdict = await store.acquire(Claim("seed", 0, charges), now)
    assert not verdict.unseeded and verdict.refusal is None
    await store.settle(Claim("seed", 0, charges), 0, {}, now)


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time, its workers' included."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for p in [pid, *_children(pid)]:
        with open(f"/proc/{p}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as file:
            return [int(c) for c in file.read().split()]
    except OSError:
        return []


async def per_request_cpu(gateway: GatewayProcess, keys: dict[str, str], seconds: float, rounds: int) -> None:
    url = f"{gateway.url}/v5/completions"
    samples = {name: [] for name in keys}
    async with aiohttp.ClientSession() as session:
        for key in keys.values():
            await closed_loop(session, url, BODY, {"x-api-key": key}, 1, 0.5, Sample())
        for _ in range(rounds):
            for name, key in keys.items():
                sample = Sample()
                before = cpu_seconds(gateway.proc.pid)
                await closed_loop(session, url, BODY, {"x-api-key": key}, 1, seconds, sample)
                used = cpu_seconds(gateway.proc.pid) - before
                if sample.errors:
                    raise RuntimeError(f"{name}: {sample.errors} errors")
                samples[name].append(used / len(sample.latencies) * 1e6)
    print(f"\n2. gateway CPU per request at concurrency 1 ({rounds} rounds x {seconds}s, median):")
    base = statistics.median(samples["key without limits"])
    for name, values in samples.items():
        cpu = statistics.median(values)
        rounds_text = ", ".join(f"{v:.0f}" for v in values)
        print(f"{name:<28}{cpu:>8.0f} µs CPU   (+{cpu - base:.0f} µs)   rounds: {rounds_text}")


async def throughput(targets: dict[str, tuple[str, str]], seconds: float, rounds: int) -> None:
    samples = {name: Sample() for name in targets}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for url, key in targets.values():
            await closed_loop(session, url, BODY, {"x-api-key": key}, 8, 0.5, Sample())
        for _ in range(rounds):
            for name, (url, key) in targets.items():
                await closed_loop(session, url, BODY, {"x-api-key": key}, 32, seconds, samples[name])
    print(f"\n3. requests/s at concurrency 32 ({rounds} rounds x {seconds}s, round-robin):")
    for name, s in samples.items():
        print(f"{name:<22}{s.rps:>8.0f} req/s  p50 {s.pct(0.5):.1f} ms  p99 {s.pct(0.99):.1f} ms  errors {s.errors}")
    one, two = (samples[n].rps for n in targets)
    print(f"  --workers 2 / --workers 1: {two / one:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description="the cost of limits and the gain of workers, side by side")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=5000, help="per round of part 1")
    parser.add_argument("--redis", default=os.environ.get("GATEWAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--in-process", action="store_true", help="part 1 only: the limiter in-process")
    parser.add_argument("--callgrind", action="store_true", help="part 1 only, in instructions, under valgrind")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # one run of --callgrind (a child)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        one_variant(args.variant, args.redis, args.prefix, args.requests)
        return 0
    print(f"cpus: {os.cpu_count()}; redis: {args.redis}; vendor: tests/fakes/openai_upstream.py")
    if args.callgrind:
        part_limiter_callgrind(args.redis, args.requests, args.rounds)
        return 0
    part_limiter(args.redis, args.requests, args.rounds)
    if args.in_process:
        return 0

    vendor_port = free_port()
    vendor = start_vendor(vendor_port)
    prefix = redis_prefix()
    try:
        with sqlite_database() as db:
            env = {"GATEWAY_DATABASE_URL": db.url, "GATEWAY_VENDOR_FAKE_PROTOCOL": "openai",
                   "GATEWAY_VENDOR_FAKE_BASE_URL": f"http://127.0.0.1:{vendor_port}/v1",
                   "GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_LOG_LEVEL": "warning",
                   "GATEWAY_REDIS_URL": args.redis, "GATEWAY_REDIS_PREFIX": prefix}
            limited, limited_id, _ = new_key(db.url)
            run_cli(db.url, "limits", "set", "--key", limited_id, "--rpm", str(10**9), "--tpm", str(10**12),
                    "--concurrent", str(10**6), "--budget-tokens", str(10**15), "--models", "fake/*")
            with GatewayProcess(env) as gateway:
                asyncio.run(per_request_cpu(gateway, {"key without limits": db.key, "key with limits (redis)": limited},
                                            args.seconds, args.rounds))
            one, two = GatewayProcess({**env, "GATEWAY_WORKERS": "1"}), GatewayProcess({**env, "GATEWAY_WORKERS": "2"})
            with one, two:
                asyncio.run(throughput({"--workers 1": (f"{one.url}/v5/completions", db.key),
                                        "--workers 2": (f"{two.url}/v5/completions", db.key)},
                                       args.seconds, args.rounds))
    finally:
        vendor.terminate()
        vendor.wait()
        remove_redis_keys(prefix, args.redis)
    print(json.dumps({"command": " ".join(["python -m bench.limits", *sys.argv[1:]])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
