"""Tokens/s of the `local/` vendor through the gateway against the same engine called directly.

    .venv/bin/python -m bench.local [--rounds 3] [--max-tokens 128] [--parallel 4]

Same model, same settings on both sides: the gateway (a `gateway serve` subprocess, real HTTP)
and llama.cpp's engine in this process (xllamacpp's in-process API, one thread per request),
measured in turns so that load from elsewhere hits both alike. Greedy
decoding with the end-of-text tokens banned makes every request generate exactly --max-tokens
tokens. A round runs each mode (stream or not, one request at a time or --parallel at once) on
both sides back to back. Other work on the machine only ever slows a run down, so each side's
best run over the rounds is its least disturbed one: the ratio of the bests is the result (the
goal is >= 0.95); the median of the per-round ratios is printed too, to show the spread.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson

from tests.gateway_process import GatewayProcess
from tests.llamacpp import EngineServer
from vendors.local import PACKAGED_NAME

KEY = "sk-bench"
PROMPT = "Once upon a time"
NO_EOS = {"0": -100, "2": -100}


def engine_body(max_tokens: int, stream: bool) -> dict:
    """What the adapter sends the engine for the gateway request below (vendors/local.py:_body)."""
    return {"prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0.0, "samplers": ["temperature"],
            "logit_bias": NO_EOS, "stream": stream}


def gateway_body(max_tokens: int, stream: bool) -> dict:
    body = {"model": f"local/{PACKAGED_NAME}", "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0,
            "logit_bias": NO_EOS}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


class Direct:
    """The engine in this process, with the adapter's settings, through its own non-streamed or
    streamed call (the adapter always streams, and pays for it on non-streamed requests)."""

    def __init__(self, parallel: int, context_size: int, threads: int | None) -> None:
        self.engine = EngineServer(parallel, context_size, threads)
        self.server = self.engine.server

    def one(self, max_tokens: int, stream: bool) -> int:
        if not stream:
            return self.server.handle_completions(engine_body(max_tokens, False))["usage"]["completion_tokens"]
        usage = {}

        def on_chunk(chunk: dict | None) -> bool:
            if chunk and chunk.get("usage"):
                usage.update(chunk["usage"])
            return False

        self.server.handle_completions(engine_body(max_tokens, True), on_chunk)
        return usage["completion_tokens"]

    def run(self, requests: int, concurrency: int, max_tokens: int, stream: bool) -> float:
        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as threads:
            tokens = sum(threads.map(lambda _: self.one(max_tokens, stream), range(requests)))
        return tokens / (time.perf_counter() - started)


class ThroughGateway:
    def __init__(self, url: str) -> None:
        self.url = url

    async def _one(self, client: httpx.AsyncClient, max_tokens: int, stream: bool) -> int:
        body = orjson.dumps(gateway_body(max_tokens, stream))
        headers = {"content-type": "application/json"}
        if not stream:
            r = await client.post("/v5/completions", content=body, headers=headers)
            return r.json()["usage"]["completion_tokens"]
        tail = b""
        async with client.stream("POST", "/v5/completions", content=body, headers=headers) as r:
            async for data in r.aiter_raw():
                tail = (tail + data)[-2048:]  # only the usage chunk at the end is read
        usage = next(e for e in reversed(tail.split(b"\n\n")) if e.startswith(b"data: {") and b'"usage"' in e)
        return orjson.loads(usage[len(b"data: "):])["usage"]["completion_tokens"]

    async def _run(self, requests: int, concurrency: int, max_tokens: int, stream: bool) -> float:
        gate = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(base_url=self.url, headers={"x-api-key": KEY}, timeout=600) as client:
            await self._one(client, 1, stream)  # a warm connection, as the direct side has no connecting to do

            async def one() -> int:
                async with gate:
                    return await self._one(client, max_tokens, stream)

            started = time.perf_counter()
            tokens = sum(await asyncio.gather(*(one() for _ in range(requests))))
            return tokens / (time.perf_counter() - started)

    def run(self, requests: int, concurrency: int, max_tokens: int, stream: bool) -> float:
        return asyncio.run(self._run(requests, concurrency, max_tokens, stream))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--parallel", type=int, default=4, help="engine slots, and the concurrent mode's requests")
    parser.add_argument("--context-size", type=int, default=1024)
    parser.add_argument("--threads", type=int, help="engine threads (default: the engine's, all cores)")
    args = parser.parse_args()
    env = {"GATEWAY_API_KEYS": f"{KEY}=bench", "GATEWAY_VENDOR_LOCAL_PARALLEL": str(args.parallel),
           "GATEWAY_VENDOR_LOCAL_CONTEXT_SIZE": str(args.context_size), "GATEWAY_LOG_LEVEL": "warning"}
    if args.threads:
        env["GATEWAY_VENDOR_LOCAL_THREADS"] = str(args.threads)
    modes = [(stream, concurrency) for stream in (False, True) for concurrency in (1, args.parallel)]
    results: dict[tuple[bool, int], dict[str, list[float]]] = {m: {"gateway": [], "direct": []} for m in modes}
    with GatewayProcess(env) as gateway:
        sides: dict[str, Callable[..., float]] = {
            "gateway": ThroughGateway(gateway.url).run,
            "direct": Direct(args.parallel, args.context_size, args.threads).run,
        }
        for side in sides.values():  # warm-up: first decodes are slower
            side(2, 1, 16, False)
        for round_ in range(args.rounds):
            for stream, concurrency in modes:
                requests = 2 if concurrency == 1 else concurrency
                order = ("gateway", "direct") if round_ % 2 == 0 else ("direct", "gateway")
                for name in order:
                    rate = sides[name](requests, concurrency, args.max_tokens, stream)
                    results[(stream, concurrency)][name].append(rate)
    print(f"local/{PACKAGED_NAME}, {args.max_tokens} tokens per request, {args.parallel} slots, "
          f"{args.threads or 'default'} threads, best of {args.rounds} rounds (tokens/s)")
    print(f"{'mode':<24}{'gateway':>9}{'direct':>9}{'ratio':>7}{'median ratio':>14}")
    for (stream, concurrency), rates in results.items():
        best_gateway, best_direct = max(rates["gateway"]), max(rates["direct"])
        ratios = [g / d for g, d in zip(rates["gateway"], rates["direct"], strict=True)]
        mode = f"{'stream' if stream else 'non-stream'}, {concurrency} at once"
        print(f"{mode:<24}{best_gateway:>9.1f}{best_direct:>9.1f}{best_gateway / best_direct:>7.3f}"
              f"{statistics.median(ratios):>14.3f}")


if __name__ == "__main__":
    main()
