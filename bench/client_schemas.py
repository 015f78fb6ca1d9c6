"""What checking a chat request's JSON Schemas costs the event loop, at the gateway's bounds
(gateway/core/client_schemas.py), against reading the body they came in.

    .venv/bin/python -m bench.client_schemas [--rounds 5]

Each case is the largest request of its kind the bounds let through. Its schemas are checked as
a request's are: the rules (endpoints/chat/rules.py `check`: size, nesting and names, the
meta-schema) and the plan's compiling of a strict schema, which answers are held to
(planner/verify.py `answer_schema`). Meanwhile a ticker on the loop sleeps 1 ms
at a time and records the longest gap between two ticks: how long any other request on the loop
would have waited, with the checks on the loop and in a worker thread. Beside them, what reading
the same body costs (parsing, the nesting check and the contract's validation, http/server/validation.py),
and reading the largest bodies, of few objects and of many: the loop's share a request already takes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema_rs
import orjson

from gateway.core import client_schemas
from gateway.http.server.validation import MAX_DEPTH, _nested_deeper
from gateway.endpoints.chat import rules as chat_rules
from gateway.planner.verify import STRICT_SCHEMA, strict_schema

ROOT = Path(__file__).resolve().parents[1]
USER = [{"role": "user", "content": "hello"}]


def tools(count: int, properties: int) -> dict[str, Any]:
    """`count` tools of `properties` string properties each."""
    parameters = [{"type": "object", "properties": {f"field_{i}_{j}": {"type": "string"} for j in range(properties)}}
                  for i in range(count)]
    return {"tools": [{"type": "function", "function": {"name": f"tool_{i}", "parameters": p}}
                      for i, p in enumerate(parameters)]}


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "answer", "strict": True,
                                                                       "schema": schema}}}


def flat(objects: int, patterns: list[str] = ()) -> dict[str, Any]:
    """An object schema of `objects` JSON objects in all (itself, its `properties`, each property),
    the first properties with `patterns`."""
    properties: dict[str, Any] = {f"field_{j}": {"type": "string"} for j in range(objects - 2)}
    for j, pattern in enumerate(patterns):
        properties[f"field_{j}"]["pattern"] = pattern
    return {"type": "object", "properties": properties}


def deep(levels: int) -> dict[str, Any]:
    """An object schema nested `levels` levels deep (an object in `properties` is two)."""
    schema: dict[str, Any] = {"type": "string"}
    depth = 1
    while depth + 2 <= levels:
        schema = {"type": "object", "properties": {"inner": schema}}
        depth += 2
    return schema


# Patterns that each compile to nearly REGEX_SIZE (and differ, so nothing is compiled once for all).
HEAVY = [f"^.{{0,{240 + i}}}$" for i in range(client_schemas.MAX_PATTERNS)]

CASES: dict[str, dict[str, Any]] = {
    "128 tools, 4,992 objects": tools(128, 37),
    "a strict schema of 5,000 objects": strict(flat(client_schemas.MAX_OBJECTS)),
    f"a strict schema with {len(HEAVY)} patterns near the regex bound": strict(flat(100, HEAVY)),
    f"a strict schema {client_schemas.MAX_DEPTH} levels deep": strict(deep(client_schemas.MAX_DEPTH)),
    "the worst: a strict schema of both": strict(flat(client_schemas.MAX_OBJECTS, HEAVY)),
}
# Bodies the gateway reads in full before any rule: the largest of few objects and of many.
READING_ONLY = {
    "4096 messages, 1 MiB (reading only)": {"messages": [{"role": "user", "content": "x" * 230}] * 4096},
    "128 tools of 1 MiB, 40,000 objects (reading only)": tools(128, 310),
}


def body_validator() -> jsonschema_rs.Validator:
    spec = json.loads((ROOT / "openapi.json").read_text())
    return jsonschema_rs.Draft202012Validator(spec | {"$ref": "#/components/schemas/ChatCompletionRequest"})


def checked(body: dict[str, Any]) -> None:
    """What the gateway does with a request's schemas before its vendor call."""
    chat_rules.check(body)
    schema = strict_schema(body.get("response_format") or {})
    if schema is not None:
        client_schemas.compiled(schema, STRICT_SCHEMA)


async def longest_gap(work: Callable[[], Any], threaded: bool) -> float:
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
    await asyncio.sleep(0.01)
    if threaded:
        await asyncio.to_thread(work)
    else:
        work()
    await asyncio.sleep(0.002)  # a tick after the work
    done.set()
    await ticking
    return max(gaps)


def cpu_of(work: Callable[[], Any]) -> float:
    start = time.process_time()
    work()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    validator = body_validator()
    print(f"best of {args.rounds} rounds; bounds: {client_schemas.MAX_BYTES} bytes, {client_schemas.MAX_OBJECTS} "
          f"objects, {client_schemas.MAX_DEPTH} levels, {client_schemas.MAX_PATTERNS} patterns of "
          f"{client_schemas.REGEX_SIZE} bytes")
    print(f"{'request':58} {'bytes':>9} {'read body':>10} {'checks':>9} {'stall':>9} {'in thread':>10}")
    for name, extra in {**CASES, **READING_ONLY}.items():
        body = {"model": "fake/m", "messages": USER} | extra
        raw = orjson.dumps(body)

        def read(raw: bytes = raw) -> None:
            parsed = orjson.loads(raw)
            assert not _nested_deeper(raw, parsed, MAX_DEPTH) and validator.is_valid(parsed)

        reading = min(cpu_of(read) for _ in range(args.rounds))
        if name in READING_ONLY:
            print(f"{name:58} {len(raw):9} {reading * 1e3:7.1f} ms")
            continue
        def check(body: dict[str, Any] = body) -> None:
            checked(body)

        checks = min(cpu_of(check) for _ in range(args.rounds))
        stall = min(asyncio.run(longest_gap(check, False)) for _ in range(args.rounds))
        threaded = min(asyncio.run(longest_gap(check, True)) for _ in range(args.rounds))
        print(f"{name:58} {len(raw):9} {reading * 1e3:7.1f} ms {checks * 1e3:6.1f} ms {stall * 1e3:6.1f} ms "
              f"{threaded * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
