"""What limits and workers cost and give, measured side by side in one run (not a test).

1. The limiter in-process: CPU time per request (admit + settle, one request after another, each
   not waiting for its settlement's answer, as in the gateway) with no limits, with limits counted
   in memory, and with limits counted in Redis on loopback (rpm, tpm, concurrency and a token
   budget on the key, rpm on its account: the Lua scripts' every branch, two calls), and with a
   key's rpm alone in Redis (one call: nothing to settle). The Redis server's own CPU is not the
   gateway's and is not counted.
2. A real gateway (`gateway serve`, one worker) in front of the fast fake vendor, on a Redis of the
   bench's own (loopback, so that it can be pinned): its CPU time per request (from /proc) for a
   key with every kind of limit and for a key without, in alternating rounds; at concurrency 1,
   then at 32 with the gateway pinned to a core of its own and the load generator, the vendor and
   Redis on the other (the cost of a request in capacity). With `--in-process`, the same two keys
   through the app called directly (bench/inprocess.py: no sockets, the vendor answering
   in-process), each run a process of its own, runs alternating.
3. Requests per second at concurrency 32 of `gateway serve --workers 2` against `--workers 1`,
   round-robin rounds (the load generator shares the machine's cores with the gateways).

With `--callgrind` (parts 1 and 2 in-process) every run is a process of its own under valgrind,
and what is compared is instructions per request in user space: the same on a busy machine as on
an idle one, but blind to the kernel's share of a round trip to Redis (its system calls).

    python -m bench.limits [--seconds 3] [--rounds 3] [--redis redis://127.0.0.1:6379/0] [--against CHECKOUT]
    python -m bench.limits --in-process [--callgrind] [--requests 5000] [--gateway-requests 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import uvloop

from bench import inprocess
from bench.harness import (
    BODY,
    VALGRIND,
    Sample,
    _children,
    callgrind,
    checkout_python,
    closed_loop,
    collected,
    cores_apart,
    cpu_seconds,
    pin,
    revision,
    start_vendor,
)
from gateway.limits.counters import BudgetClaim, Charge, Claim, settled
from gateway.limits.limiter import Limiter
from gateway.limits.memory_counters import MemoryCounters
from gateway.limits.redis_counters import RedisCounters
from gateway.limits.rules import ACCOUNT, KEY, TOKENS, Budget, Limits, Subject
from tests.support.fakes.server import free_port
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import new_key, run_cli, sqlite_database
from tests.support.redis_servers import RedisServer, redis_prefix, remove_redis_keys

LIMITS = Limits(rpm=10**9, tpm=10**12, concurrent=10**6, budgets=(Budget(TOKENS, 10**15, "month"),))
ROW = {"total_tokens": 20}
# Part 2's key: every kind of limit, none of them ever reached.
EVERY_LIMIT = ("--rpm", str(10**9), "--tpm", str(10**12), "--concurrent", str(10**6), "--budget-tokens", str(10**15),
               "--models", "fake/*")


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
        grant = await limiter.ask(key_id="key_bench", account="acct", model="fake/m", prompt_tokens=4,
                                  completion_tokens=16, request_id=f"r{i}").grant()
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


def one_variant(name: str, redis_url: str, prefix: str, requests: int) -> None:
    """A child of `part_limiter_callgrind`: variant `name` alone, under valgrind."""
    store_name, subjects = VARIANTS[name]

    async def run() -> None:
        stores = await _stores(redis_url, prefix)
        callgrind(True)
        await limiter_cost(stores[store_name], subjects, requests)
        callgrind(False)
        await stores["redis"].close()

    uvloop.run(run())


def part_limiter_callgrind(redis_url: str, requests: int, rounds: int) -> None:
    prefix = redis_prefix()
    results: dict[str, list[float]] = {name: [] for name in VARIANTS}
    try:
        for _ in range(rounds):
            for name in VARIANTS:
                command = [*VALGRIND, sys.executable, "-m", "bench.limits", "--variant", name, "--requests",
                           str(requests), "--redis", redis_url, "--prefix", prefix]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                results[name].append(collected(done.stderr) / requests)
    finally:
        remove_redis_keys(prefix, redis_url)
    print(f"\n1. the limiter in-process under callgrind, {requests} requests x {rounds} runs (median), "
          "admit + settle, instructions per request (user space):")
    base = statistics.median(results["no limits"])
    for name, values in results.items():
        median = statistics.median(values)
        print(f"{name:<18}{median:>10.0f}   (+{median - base:.0f})   runs: " + " ".join(f"{v:.0f}" for v in values))


# -- 2, in-process: the whole app, its vendor answering in-process --------------------------------
def gateway_variant(db_url: str, key: str, redis: str, prefix: str, requests: int, callgrind: bool) -> float:
    """A child of `part_gateway_in_process`: CPU seconds per request for `key` (or instructions)."""
    env = {"GATEWAY_DATABASE_URL": db_url, "GATEWAY_LOG_LEVEL": "warning", "GATEWAY_REDIS_URL": redis,
           "GATEWAY_REDIS_PREFIX": prefix}
    if callgrind:
        # Keys and limits are read again from the database on a clock: under valgrind's slowness a
        # run would do so many times, and the slower variant more often. Counting instructions,
        # they are read once, at the start (as the ledger commits once: bench/inprocess.py).
        env |= {"GATEWAY_KEY_CACHE_SECONDS": "3600", "GATEWAY_LIMITS_CACHE_SECONDS": "3600"}
    return uvloop.run(inprocess.drive(env, requests, key, callgrind if callgrind else None))


def part_gateway_in_process(redis: str, requests: int, rounds: int, callgrind: bool) -> None:
    prefix = redis_prefix()
    results: dict[str, list[float]] = {}
    try:
        with sqlite_database() as db:
            limited, limited_id, _ = new_key(db.url)
            run_cli(db.url, "limits", "set", "--key", limited_id, *EVERY_LIMIT)
            keys = {"key without limits": db.key, "key with limits (redis)": limited}
            results = {name: [] for name in keys}
            for _ in range(rounds):
                for name, key in keys.items():
                    command = [sys.executable, "-m", "bench.limits", "--gateway-variant", "--db", db.url, "--key", key,
                               "--redis", redis, "--prefix", prefix, "--requests", str(requests)]
                    done = subprocess.run((VALGRIND + command + ["--callgrind"]) if callgrind else command,
                                          capture_output=True, text=True, check=True)
                    results[name].append(collected(done.stderr) / requests if callgrind
                                         else float(done.stdout.split()[-1]) * 1e6)
    finally:
        remove_redis_keys(prefix, redis)
    unit = "instructions" if callgrind else "µs CPU"
    print(f"\n2. the whole app in-process (no sockets; its vendor in-process), {requests} completions per run, "
          f"{rounds} runs per key, alternately; {unit} per request (median):")
    base = statistics.median(results["key without limits"])
    for name, values in results.items():
        median = statistics.median(values)
        print(f"{name:<28}{median:>10.0f}   (+{median - base:.0f}, {median / base:.3f}x)   runs: "
              + " ".join(f"{v:.0f}" for v in values))


async def _seed(store, subjects: dict[Subject, Limits]) -> None:
    now = time.time()
    charges = [Charge(s, lim, [BudgetClaim(b, b.period_at(now), 0, seed=0) for b in lim.budgets])
               for s, lim in subjects.items()]
    verdict = await store.acquire(Claim("seed", 0, charges), now)
    assert not verdict.unseeded and verdict.refusal is None
    await settled(store, Claim("seed", 0, charges), 0, {}, now)


def switches(pid: int) -> tuple[int, int]:
    """A process's context switches so far, its workers' included: (voluntary: it waited, for
    Redis, a vendor or a client; involuntary: it was preempted, by another process wanting its core)."""
    voluntary = involuntary = 0
    for p in [pid, *_children(pid)]:
        with open(f"/proc/{p}/status") as status:
            for line in status:
                if line.startswith("voluntary_ctxt_switches"):
                    voluntary += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    involuntary += int(line.split()[1])
    return voluntary, involuntary


async def per_request_cpu(targets: dict[str, tuple[GatewayProcess, str]], seconds: float, rounds: int,
                          concurrency: int) -> None:
    """`targets`: name -> (gateway, key); a name "<gateway>: key ..." is compared with its gateway's
    "<gateway>: key without limits". At concurrency 1 every round trip to Redis is a wait of its
    own (the gateway sleeps, and wakes for the reply: context switches, colder caches); at 32 the
    replies of many requests come in few reads."""
    samples: dict[str, list[float]] = {name: [] for name in targets}
    waits: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in targets}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for gateway, key in targets.values():
            await closed_loop(session, f"{gateway.url}/v5/completions", BODY, {"x-api-key": key}, concurrency, 0.5,
                              Sample())
        for _ in range(rounds):
            for name, (gateway, key) in targets.items():
                sample = Sample()
                before, switched = cpu_seconds(gateway.proc.pid, workers=True), switches(gateway.proc.pid)
                await closed_loop(session, f"{gateway.url}/v5/completions", BODY, {"x-api-key": key}, concurrency,
                                  seconds, sample)
                used = cpu_seconds(gateway.proc.pid, workers=True) - before
                voluntary, involuntary = (b - a for a, b in zip(switched, switches(gateway.proc.pid)))
                if sample.errors:
                    raise RuntimeError(f"{name}: {sample.errors} errors")
                answered = len(sample.latencies)
                samples[name].append(used / answered * 1e6)
                waits[name].append((voluntary / answered, involuntary / answered, answered / sample.seconds,
                                    sample.pct(0.5)))
    print(f"\n2. gateway CPU per request at concurrency {concurrency} ({rounds} rounds x {seconds}s, median; best):")
    for name, values in samples.items():
        cpu, best = statistics.median(values), min(values)
        base = statistics.median(samples[name.rpartition("key ")[0] + "key without limits"])
        rounds_text = ", ".join(f"{v:.0f}" for v in values)
        print(f"{name:<40}{cpu:>8.0f} µs CPU (best {best:.0f})   (+{cpu - base:.0f} µs)   rounds: {rounds_text}")
    # Each round against the round of the key without limits just before it (the same gateway):
    # the machine's other work changes slowly, so neighbouring rounds share most of it.
    for name, values in samples.items():
        baseline = samples[name.rpartition("key ")[0] + "key without limits"]
        if values is not baseline:
            paired = [v - b for v, b in zip(values, baseline)]
            print(f"   {name}, round by round: median +{statistics.median(paired):.0f} µs   "
                  f"({', '.join(f'{d:+.0f}' for d in paired)})")
    # What the rounds' CPU goes with: a wait mid-request (voluntary) costs its wake-up and colder
    # caches after; a preemption (involuntary) is other work on the machine taking the core.
    print("   per request, each round: context switches voluntary / involuntary, requests/s, p50 latency")
    for name, rows in waits.items():
        print(f"   {name:<37}" + "   ".join(f"{v:.2f} / {i:.2f}, {r:.0f}/s, {p:.3f} ms" for v, i, r, p in rows))


def machine_cpu_seconds() -> float:
    """CPU seconds every process on the machine has used (all cores, /proc/stat), idle left out."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


async def throughput(targets: dict[str, tuple[GatewayProcess, str]], vendor: subprocess.Popen, seconds: float,
                     rounds: int) -> None:
    samples = {name: Sample() for name in targets}
    # Where the machine's cores went during each target's rounds: its gateway (workers included),
    # the fake vendor, this load generator, and everything else (other work on the machine).
    cores = {name: [0.0, 0.0, 0.0, 0.0] for name in targets}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for gateway, key in targets.values():
            await closed_loop(session, f"{gateway.url}/v5/completions", BODY, {"x-api-key": key}, 8, 0.5, Sample())
        for _ in range(rounds):
            for name, (gateway, key) in targets.items():
                before = (cpu_seconds(gateway.proc.pid, workers=True), cpu_seconds(vendor.pid, workers=True), time.process_time(),
                          machine_cpu_seconds())
                await closed_loop(session, f"{gateway.url}/v5/completions", BODY, {"x-api-key": key}, 32, seconds,
                                  samples[name])
                after = (cpu_seconds(gateway.proc.pid, workers=True), cpu_seconds(vendor.pid, workers=True), time.process_time(),
                         machine_cpu_seconds())
                used = [b - a for a, b in zip(before, after)]
                used[3] -= sum(used[:3])  # the rest of the machine
                for i, value in enumerate(used):
                    cores[name][i] += value
    print(f"\n3. requests/s at concurrency 32 ({rounds} rounds x {seconds}s, round-robin):")
    for name, s in samples.items():
        print(f"{name:<22}{s.rps:>8.0f} req/s  p50 {s.pct(0.5):.1f} ms  p99 {s.pct(0.99):.1f} ms  errors {s.errors}")
    one, two = (samples[n].rps for n in targets)
    print(f"  --workers 2 / --workers 1: {two / one:.2f}x")
    print(f"  cores busy (of {os.cpu_count()}) during the rounds: gateway, fake vendor, load generator, the rest")
    for name, (gateway_cpu, vendor_cpu, client_cpu, rest) in cores.items():
        wall = samples[name].seconds
        print(f"  {name:<20}{gateway_cpu / wall:.2f}, {vendor_cpu / wall:.2f}, {client_cpu / wall:.2f}, "
              f"{rest / wall:.2f}   (gateway {gateway_cpu / len(samples[name].latencies) * 1e6:.0f} µs CPU "
              "per request)")


def main() -> int:
    parser = argparse.ArgumentParser(description="the cost of limits and the gain of workers, side by side")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=5000, help="per round of part 1")
    parser.add_argument("--redis", default=os.environ.get("GATEWAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--against", type=Path, help="part 2: another checkout's gateway too, on the same database")
    parser.add_argument("--in-process", action="store_true",
                        help="parts 1 and 2 in-process (2: the app called directly, without sockets); no part 3")
    parser.add_argument("--callgrind", action="store_true", help="--in-process, in instructions, under valgrind")
    parser.add_argument("--gateway-requests", type=int, default=1000, help="per run of part 2 in-process")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # one run of part 1 under callgrind (a child)
    parser.add_argument("--gateway-variant", action="store_true", help=argparse.SUPPRESS)  # one of part 2 in-process
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        one_variant(args.variant, args.redis, args.prefix, args.requests)
        return 0
    if args.gateway_variant:
        with contextlib.redirect_stderr(open(os.devnull, "w")):  # its log; valgrind's summary is not Python's
            print(gateway_variant(args.db, args.key, args.redis, args.prefix, args.requests, args.callgrind))
        return 0
    print(f"cpus: {os.cpu_count()}; load average {os.getloadavg()[0]:.2f}; redis: {args.redis}; "
          "vendor: tests/support/fakes/openai_upstream.py")
    if args.callgrind:
        part_limiter_callgrind(args.redis, args.requests, args.rounds)
    else:
        part_limiter(args.redis, args.requests, args.rounds)
    if args.in_process or args.callgrind:
        part_gateway_in_process(args.redis, args.gateway_requests, args.rounds, args.callgrind)
        return 0

    vendor_port = free_port()
    vendor = start_vendor(vendor_port)
    prefix = redis_prefix()
    # Parts 2 and 3 on a Redis of their own (loopback, the same redis-server), which part 2 can pin
    # beside the load generator: the machine's Redis would take the pinned gateway's core.
    store = RedisServer().start()
    try:
        with sqlite_database() as db:
            env = {"GATEWAY_DATABASE_URL": db.url, "GATEWAY_VENDOR_FAKE_PROTOCOL": "openai",
                   "GATEWAY_VENDOR_FAKE_SERVER": "openai",
                   "GATEWAY_VENDOR_FAKE_BASE_URL": f"http://127.0.0.1:{vendor_port}/v1",
                   "GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_LOG_LEVEL": "warning",
                   "GATEWAY_REDIS_URL": store.url, "GATEWAY_REDIS_PREFIX": prefix}
            limited, limited_id, _ = new_key(db.url)
            run_cli(db.url, "limits", "set", "--key", limited_id, *EVERY_LIMIT)
            gateways = {"": GatewayProcess(env)}
            if args.against:  # the same database: the other checkout's schema must be this one's
                gateways[f"{revision(args.against)}: "] = GatewayProcess(env, cwd=args.against.resolve(),
                                                                             python=checkout_python(args.against))
            with contextlib.ExitStack() as running:
                for gateway in gateways.values():
                    running.enter_context(gateway)
                targets = {f"{name}{key}": (gateway, secret) for name, gateway in gateways.items()
                           for key, secret in (("key without limits", db.key), ("key with limits (redis)", limited))}
                asyncio.run(per_request_cpu(targets, args.seconds, args.rounds, 1))
                # At 32 the gateway is pinned to a core of its own and kept busy, the load generator and
                # the vendor on the others (Redis where the system runs it): its CPU per request is then
                # what a request costs of its capacity, whatever the waits of a lone request cost.
                everything = os.sched_getaffinity(0)
                own, rest = cores_apart()
                for gateway in gateways.values():
                    pin(gateway.proc.pid, own)
                pin(vendor.pid, rest)
                pin(store.proc.pid, rest)
                os.sched_setaffinity(0, rest)
                try:
                    asyncio.run(per_request_cpu(targets, args.seconds, args.rounds, 32))
                finally:
                    for pid in [os.getpid(), vendor.pid, store.proc.pid, *(g.proc.pid for g in gateways.values())]:
                        pin(pid, everything)
            one, two = GatewayProcess({**env, "GATEWAY_WORKERS": "1"}), GatewayProcess({**env, "GATEWAY_WORKERS": "2"})
            with one, two:
                asyncio.run(throughput({"--workers 1": (one, db.key), "--workers 2": (two, db.key)}, vendor,
                                       args.seconds, args.rounds))
    finally:
        vendor.terminate()
        vendor.wait()
        store.stop()
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    print(json.dumps({"command": " ".join(["python -m bench.limits", *sys.argv[1:]])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
