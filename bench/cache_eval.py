"""An evaluation harness's re-run with the response cache on: the same scores, from the cache.

    .venv/bin/python -m bench.cache_eval [--items 30] [--choices 4] [--concurrency 2]

The workload is what lm-evaluation-harness sends to score multiple-choice tasks through the legacy
completions contract: for every item, one request per answer, `prompt` the context and the answer,
`echo` with `logprobs` 1 and `max_tokens` 1 at temperature 0, and the score read from the answer's
prompt logprobs (the sum of the answer's tokens' logprobs; the item is right when the first answer,
the gold one here, scores highest). It runs against the embedded `local/smollm2-135m` model, twice:
the first run is all misses (the model scores every prompt), the second all hits, with the same
scores to the last bit. Then the same requests go to the fast fake OpenAI vendor with the cache
bypassed (`x-gateway-cache: off`): what a plain request through the gateway costs it, without a
model to run.

Printed: each run's wall time, the gateway's CPU per request (a miss includes the embedded model's
compute, in the gateway's process), and a hit's CPU against a plain request through the fake
vendor. Figures are in docs/performance.md ("Response cache").
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from bench.harness import cpu_seconds, start_vendor
from tests.support.environments import LOCAL_MODEL, local_env
from tests.support.fakes.server import free_port
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import sqlite_database

CONTEXTS = ("The cat sat on the", "To boil water, you", "The capital of France is", "She opened the door and",
            "In winter the lake", "He paid for the coffee with", "The train left the station at",
            "Plants need sunlight to", "After the rain, the street was", "The children played in the")
ENDINGS = (" mat.", " heat it on a stove.", " Paris.", " walked inside.", " freezes over.", " cash.",
           " noon.", " grow.", " wet.", " park.")


@dataclass
class Run:
    seconds: float
    cpu: float  # the gateway's CPU seconds
    scores: list[float]  # per request: the answer's log-likelihood
    cache: dict[str, int]  # x-gateway-cache values seen

    def per_request_ms(self) -> float:
        return self.cpu / len(self.scores) * 1000


def workload(items: int, choices: int) -> list[tuple[str, str]]:
    """(context, answer) per request: the gold answer first, then others taken from other items."""
    found = []
    for i in range(items):
        context = CONTEXTS[i % len(CONTEXTS)] + ("" if i < len(CONTEXTS) else f" (take {i // len(CONTEXTS)})")
        for c in range(choices):
            found.append((context, ENDINGS[(i + c * 3) % len(ENDINGS)] if c else ENDINGS[i % len(ENDINGS)]))
    return found


def loglikelihood(answer: dict, context: str, continuation: str) -> float:
    """The continuation's log-likelihood as lm-evaluation-harness reads it: the echoed prompt's
    token logprobs from the context's end to the prompt's end (the generated token left out)."""
    logprobs = answer["choices"][0]["logprobs"]
    end = len(context) + len(continuation)
    return sum(lp for lp, at in zip(logprobs["token_logprobs"], logprobs["text_offset"], strict=True)
               if lp is not None and len(context) <= at < end)


def run(gateway: GatewayProcess, key: str, model: str, requests: list[tuple[str, str]], concurrency: int,
        cache: str | None = None) -> Run:
    headers = {"x-api-key": key} | ({"x-gateway-cache": cache} if cache else {})
    seen: dict[str, int] = {}

    def one(client: httpx.Client, pair: tuple[str, str]) -> float:
        context, continuation = pair
        r = client.post("/v5/completions", json={"model": model, "prompt": context + continuation, "echo": True,
                                                 "logprobs": 1, "max_tokens": 1, "temperature": 0})
        r.raise_for_status()
        state = r.headers.get("x-gateway-cache", "")
        seen[state] = seen.get(state, 0) + 1
        return loglikelihood(r.json(), context, continuation)

    with httpx.Client(base_url=gateway.url, headers=headers, timeout=600) as client, \
            ThreadPoolExecutor(concurrency) as pool:
        cpu, began = cpu_seconds(gateway.proc.pid), time.perf_counter()
        scores = list(pool.map(lambda pair: one(client, pair), requests))
        return Run(time.perf_counter() - began, cpu_seconds(gateway.proc.pid) - cpu, scores, seen)


def accuracy(scores: list[float], choices: int) -> float:
    items = [scores[i:i + choices] for i in range(0, len(scores), choices)]
    return sum(max(range(choices), key=item.__getitem__) == 0 for item in items) / len(items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=30)
    parser.add_argument("--choices", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--passes", type=int, default=5,
                        help="times the hits and the fake vendor's requests are sent again for their CPU figures "
                             "(the kernel counts CPU in clock ticks: a pass of hits is a few of them)")
    args = parser.parse_args()
    requests = workload(args.items, args.choices)
    vendor_port = free_port()
    vendor = start_vendor(vendor_port)
    try:
        with sqlite_database() as db:
            env = local_env(db.url) | {
                "GATEWAY_CACHE": "memory", "GATEWAY_VALIDATE_RESPONSES": "0", "GATEWAY_LOG_LEVEL": "warning",
                "GATEWAY_VENDOR_FAKE_PROTOCOL": "openai", "GATEWAY_VENDOR_FAKE_SERVER": "openai",
                "GATEWAY_VENDOR_FAKE_BASE_URL": f"http://127.0.0.1:{vendor_port}/v1"}
            with GatewayProcess(env, ready_timeout=300) as gateway:
                run(gateway, db.key, LOCAL_MODEL, requests[:2], 1, cache="off")  # the model loaded, warm
                first = run(gateway, db.key, LOCAL_MODEL, requests, args.concurrency)
                second = run(gateway, db.key, LOCAL_MODEL, requests, args.concurrency)
                run(gateway, db.key, "fake/bench", requests[:20], 1, cache="off")  # its connections warm
                hits = run(gateway, db.key, LOCAL_MODEL, requests * args.passes, args.concurrency)
                plain = run(gateway, db.key, "fake/bench", requests * args.passes, args.concurrency, cache="off")
    finally:
        vendor.terminate()
        vendor.wait(10)
    same = first.scores == second.scores
    print(f"{len(requests)} requests ({args.items} items x {args.choices} choices), concurrency {args.concurrency}, "
          f"{LOCAL_MODEL}, GATEWAY_CACHE=memory")
    print(f"{'run':<36}{'wall s':>8}{'req/s':>9}{'CPU ms/req':>12}  cache       accuracy")
    for name, r in (("1st (misses: the model scores)", first), ("2nd (hits)", second),
                    (f"hits again, {args.passes} passes", hits),
                    (f"fake vendor, cache off, {args.passes} passes", plain)):
        shown = ", ".join(f"{k or '-'} {v}" for k, v in sorted(r.cache.items()))
        acc = "-" if r is plain else f"{accuracy(r.scores[:len(requests)], args.choices):.3f}"
        print(f"{name:<36}{r.seconds:>8.2f}{len(r.scores) / r.seconds:>9.1f}{r.per_request_ms():>12.3f}  "
              f"{shown:<12}{acc}")
    print(f"scores identical on the re-run: {same}; a hit costs {hits.per_request_ms() / first.per_request_ms():.4f}"
          f" of a miss's gateway CPU and {hits.per_request_ms() / plain.per_request_ms():.2f} of a plain request's "
          "through the fake vendor")
    if not same or second.cache != {"hit": len(requests)}:
        raise SystemExit("the re-run was not answered whole from the cache with the same scores")


if __name__ == "__main__":
    main()
