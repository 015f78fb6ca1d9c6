"""Tokens/s of the `local/` vendor through the gateway against the same engine called directly.

    .venv/bin/python -m bench.local [--rounds 7] [--max-tokens 128] [--parallel 4] [--threads N]

Same model, same settings on both sides: the gateway (a `gateway serve` subprocess, real HTTP)
and llama.cpp's engine in this process (xllamacpp's in-process API). Both are driven the same
way: one thread per request in flight. The HTTP client is a bare socket that reads the answer
whole, so that the numbers measure the gateway, not a Python HTTP client competing with the
engine for the CPU. Greedy decoding with the end-of-text tokens banned makes every request
generate exactly --max-tokens tokens.

A round runs each mode (stream or not, one request at a time or --parallel at once) on both
sides back to back. Other work on the machine only ever slows a run down, so each side's best
run over the rounds is its least disturbed one: the ratio of the bests is the result (the goal
is >= 0.95); the median of the per-round ratios is printed too, to show the spread.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import orjson

from gateway.vendors.local.model import PACKAGED_NAME
from tests.support.gateway_process import GatewayProcess
from tests.support.llamacpp import EngineServer
from tests.support.provision import TestDatabase, sqlite_database

PROMPT = "Once upon a time"
NO_EOS = {"0": -100, "2": -100}

# One request: (max_tokens, stream) -> completion tokens.
Request = Callable[[int, bool], int]


def engine_body(max_tokens: int, stream: bool) -> dict:
    """What the adapter sends the engine for the gateway request below (vendors/local/completions.py:_body)."""
    return {"prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0.0, "samplers": ["temperature"],
            "logit_bias": NO_EOS, "stream": stream}


def gateway_body(max_tokens: int, stream: bool) -> dict:
    body = {"model": f"local/{PACKAGED_NAME}", "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0,
            "logit_bias": NO_EOS}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


def direct(engine: EngineServer) -> Request:
    """The engine's own non-streamed or streamed call (the adapter always streams, and pays for
    it on non-streamed requests)."""

    def one(max_tokens: int, stream: bool) -> int:
        if not stream:
            return engine.server.handle_completions(engine_body(max_tokens, False))["usage"]["completion_tokens"]
        usage = {}

        def on_chunk(chunk: dict | None) -> bool:
            if chunk and chunk.get("usage"):
                usage.update(chunk["usage"])
            return False

        engine.server.handle_completions(engine_body(max_tokens, True), on_chunk)
        return usage["completion_tokens"]

    return one


def through_gateway(port: int, key: str) -> Request:
    def one(max_tokens: int, stream: bool) -> int:
        body = orjson.dumps(gateway_body(max_tokens, stream))
        head = (f"POST /v5/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: {key}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n")
        answer = bytearray()
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(head.encode() + body)
            while data := s.recv(1 << 16):
                answer += data
        if not stream:
            return orjson.loads(answer.split(b"\r\n\r\n", 1)[1])["usage"]["completion_tokens"]
        # The usage chunk, the last event with data; the chunked encoding's framing lies outside it.
        event = next(e for e in reversed(answer.split(b"\n\n")) if b'"usage"' in e)
        return orjson.loads(event[event.index(b"data: ") + len(b"data: "):])["usage"]["completion_tokens"]

    return one


def tokens_per_second(one: Request, requests: int, concurrency: int, max_tokens: int, stream: bool) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as threads:
        tokens = sum(threads.map(lambda _: one(max_tokens, stream), range(requests)))
    return tokens / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--parallel", type=int, default=4, help="engine slots, and the concurrent mode's requests")
    parser.add_argument("--context-size", type=int, default=1024)
    parser.add_argument("--threads", type=int, help="engine threads (default: the engine's, all cores)")
    args = parser.parse_args()
    with sqlite_database() as db:  # the gateway's accounts, keys and ledger
        rates = measure(args, db)
    report(args, rates)


def measure(args: argparse.Namespace, db: TestDatabase) -> dict[tuple[bool, int], dict[str, list[float]]]:
    env = {"GATEWAY_DATABASE_URL": db.url, "GATEWAY_VENDOR_LOCAL_PARALLEL": str(args.parallel),
           "GATEWAY_VENDOR_LOCAL_CONTEXT_SIZE": str(args.context_size), "GATEWAY_LOG_LEVEL": "warning"}
    if args.threads:
        env["GATEWAY_VENDOR_LOCAL_THREADS"] = str(args.threads)
    modes = [(stream, concurrency) for stream in (False, True) for concurrency in (1, args.parallel)]
    rates: dict[tuple[bool, int], dict[str, list[float]]] = {m: {"gateway": [], "direct": []} for m in modes}
    with GatewayProcess(env) as gateway:
        sides = {"gateway": through_gateway(gateway.port, db.key),
                 "direct": direct(EngineServer(args.parallel, args.context_size, args.threads))}
        for one in sides.values():  # warm-up: the first decodes are slower
            tokens_per_second(one, 2, 1, 16, False)
        for round_ in range(args.rounds):
            for stream, concurrency in modes:
                requests = 2 if concurrency == 1 else concurrency
                order = ("gateway", "direct") if round_ % 2 == 0 else ("direct", "gateway")
                for name in order:
                    rate = tokens_per_second(sides[name], requests, concurrency, args.max_tokens, stream)
                    rates[(stream, concurrency)][name].append(rate)
    return rates


def report(args: argparse.Namespace, rates: dict[tuple[bool, int], dict[str, list[float]]]) -> None:
    print(f"local/{PACKAGED_NAME}, {args.max_tokens} tokens per request, {args.parallel} slots, "
          f"{args.threads or 'default'} threads, best of {args.rounds} rounds (tokens/s)")
    print(f"{'mode':<24}{'gateway':>9}{'direct':>9}{'ratio':>7}{'median ratio':>14}")
    for (stream, concurrency), measured in rates.items():
        best_gateway, best_direct = max(measured["gateway"]), max(measured["direct"])
        ratios = [g / d for g, d in zip(measured["gateway"], measured["direct"], strict=True)]
        mode = f"{'stream' if stream else 'non-stream'}, {concurrency} at once"
        print(f"{mode:<24}{best_gateway:>9.1f}{best_direct:>9.1f}{best_gateway / best_direct:>7.3f}"
              f"{statistics.median(ratios):>14.3f}")


if __name__ == "__main__":
    main()
