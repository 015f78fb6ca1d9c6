"""Collecting a stream for the response cache, in-process: the CPU a chat stream of one tool call
in N argument pieces costs gateway/http/cache_relay.py's Collected, from its first piece to its
entry, for N doubling up to 80,000 (a long tool call streamed a few characters a piece). Linear
work keeps the time per piece flat as N grows.

    .venv/bin/python -m bench.cache_collect [--largest 80000] [--repeat 3]

Printed: per N, the best of `repeat` runs' CPU seconds and microseconds per piece. Figures are in
docs/performance.md ("Response cache").
"""

from __future__ import annotations

import argparse
import time

from gateway.core.chat import ChatChoice
from gateway.core.completion import Chunk, Usage
from gateway.http.cache_relay import Collected


def stream(pieces: int) -> list[list[Chunk]]:
    """A vendor's batches: the call's id and name, then its arguments a piece a batch, then the end."""
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "write", "arguments": ""}}
    batches = [[Chunk([ChatChoice(0, "", tool_calls=[first])])]]
    batches += [[Chunk([ChatChoice(0, "", tool_calls=[{"index": 0, "function": {"arguments": "ab"}}])])]
                for _ in range(pieces)]
    batches.append([Chunk([ChatChoice(0, "", "tool_calls")]), Chunk([], usage=Usage(10, pieces))])
    return batches


def collect(batches: list[list[Chunk]]) -> float:
    """CPU seconds to collect `batches` and make their entry."""
    start = time.process_time()
    collected = Collected()
    for batch in batches:
        collected.add(batch)
    collected.complete = True
    entry = collected.entry()
    seconds = time.process_time() - start
    assert entry is not None and len(entry.choices[0].tool_calls[0]["function"]["arguments"]) == 2 * (len(batches) - 2)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--largest", type=int, default=80_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = []
    n = args.largest
    while n >= 5_000:
        sizes.insert(0, n)
        n //= 2
    print(f"{'pieces':>8}  {'CPU s':>8}  {'us/piece':>8}")
    for size in sizes:
        batches = stream(size)
        best = min(collect(batches) for _ in range(args.repeat))
        print(f"{size:>8,}  {best:>8.3f}  {best / size * 1e6:>8.2f}")


if __name__ == "__main__":
    main()
