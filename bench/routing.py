"""What routing among deployments costs per request, against a vendor of one deployment, side by side.

Three measures, each variant interleaved round-robin with the others so machine noise hits all
alike, in CPU time (this process's, or the gateway's) rather than wall time:

1. the balancer alone (gateway/vendors/transport/balancer.py): pick a deployment, open its ticket, report
   a latency sample and a success, close it: what every try pays, per routing policy, idle and
   with 8 calls in flight;
2. the vendor layer in-process: `OpenAIAdapter.complete()` over httpx.MockTransport, so that the
   whole per-try path (pick, per-deployment client and URL, ticket) is counted and only the
   network is not;
3. with `--end-to-end`, a real gateway process in front of a fast fake vendor, serving one vendor
   of a single deployment and one of three deployments (all on that fake): requests/s and the
   gateway's CPU time per request at concurrency 1 and 32.

    python -m bench.routing [--rounds 7] [--end-to-end] [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections import deque
from collections.abc import Callable

import httpx
import orjson

from bench.routing_http import end_to_end
from gateway.core.endpoint import Endpoint
from gateway.core.completion import CompletionCall
from gateway.core.config import Deployment, Health, Settings, VendorConfig
from gateway.vendors import registry
from gateway.vendors.transport.balancer import Balancer
from tests.support.fakes.httpx_client import answered_by
from tests.support.fakes.openai_upstream import completion

ROUTINGS = ("least_outstanding", "weighted_random", "p2c_ewma")


def balancers() -> dict[str, Balancer]:
    one = [Deployment(base_url="http://a")]
    three = [Deployment(base_url=f"http://{h}", weight=w) for h, w in (("a", 1), ("b", 2), ("c", 1))]
    variants = {"1 deployment": Balancer("v", one)}
    for routing in ROUTINGS:
        variants[f"3, {routing}"] = Balancer("v", three, routing, Health())
    return variants


def try_cost(balancer: Balancer, iterations: int, in_flight: int) -> float:
    """CPU seconds per try: pick, begin, answered, succeeded, close, with `in_flight` others open."""
    held: deque = deque(balancer.begin(balancer.pick()) for _ in range(in_flight))
    start = time.process_time()
    for _ in range(iterations):
        ticket = balancer.begin(balancer.pick())
        ticket.answered()
        ticket.succeeded()
        held.append(ticket)
        held.popleft().close()  # the oldest call ends: `in_flight` stay open
    elapsed = time.process_time() - start
    for ticket in held:
        ticket.close()
    return elapsed / iterations


def adapter(deployments: int, routing: str):
    body = orjson.dumps(completion({"model": "m", "prompt": "hi", "max_tokens": 4}))

    async def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    config = VendorConfig(name="v", protocol="openai", routing=routing,
                          deployments=tuple(Deployment(base_url=f"http://d{i}.test/v1", api_key="sk-bench-key")
                                            for i in range(deployments)))
    vendor = registry.build(config, Settings())
    vendor.use_clients(answered_by(answer))
    return vendor


async def call_cost(vendor, iterations: int) -> float:
    """CPU seconds per `complete()` through the vendor layer."""
    start = time.process_time()
    for _ in range(iterations):
        await vendor.translators[Endpoint.COMPLETIONS].complete(CompletionCall(model="m", prompts=["hi"], max_tokens=4))
    return (time.process_time() - start) / iterations


def side_by_side(title: str, variants: dict[str, Callable[[], float]], rounds: int) -> None:
    results: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, measure in variants.items():
            results[name].append(measure())
    # The least of the rounds: the one the other engineers' work on this machine disturbed least.
    base = min(results["1 deployment"])
    print(f"\n{title}  (best of {rounds} rounds, CPU time)")
    print(f"{'variant':<24}{'µs/request':>12}{'vs 1 deployment':>18}")
    for name, values in results.items():
        cost = min(values)
        extra = "" if name == "1 deployment" else f"{(cost - base) * 1e6:+.2f} µs"
        print(f"{name:<24}{cost * 1e6:>12.2f}{extra:>18}")


def main() -> int:
    parser = argparse.ArgumentParser(description="routing cost per request vs a single deployment")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--end-to-end", action="store_true", help="also a real gateway process, over HTTP")
    parser.add_argument("--seconds", type=float, default=3.0, help="per variant and round, end to end")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, cpus: {os.cpu_count()}")

    pool = balancers()
    for in_flight in (0, 8):
        side_by_side(f"balancer only: pick + ticket + report, {in_flight} other calls in flight",
                     {name: (lambda b=b, k=in_flight: try_cost(b, 50_000, k)) for name, b in pool.items()},
                     args.rounds)

    loop = asyncio.new_event_loop()
    vendors = {"1 deployment": adapter(1, "least_outstanding"),
               **{f"3, {routing}": adapter(3, routing) for routing in ROUTINGS}}
    for vendor in vendors.values():
        loop.run_until_complete(call_cost(vendor, 500))  # warm up
    side_by_side("vendor layer in-process: OpenAIAdapter.complete() over httpx.MockTransport",
                 {name: (lambda v=v: loop.run_until_complete(call_cost(v, 3_000))) for name, v in vendors.items()},
                 args.rounds)
    for vendor in vendors.values():
        loop.run_until_complete(vendor.close())
    loop.close()

    if args.end_to_end:
        end_to_end(args.seconds, max(1, args.rounds // 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
