"""What each of the gateway's overrides of Connexion buys a request: the app as built, and variants
that each give one job back to Connexion (docs/decisions/0001-connexion.md quotes the figures).

    python -m bench.connexion [--requests 1000] [--rounds 3] [--callgrind]

Variants (gateway/http/server/connexion_overrides/ has each override):
  as built       the app as `gateway serve` builds it
  routing        no FixedRoutes: each request through Connexion's routing, then a lookup of the
                 operation in every routed layer
  key check      Connexion's wrapper around the key check (it reads the check's signature twice a
                 request), the key check given the signature that wrapper calls
  validation     Connexion's RequestValidationMiddleware (validators rebuilt every request), with
                 the gateway's validators
The handler call (direct_call.py) has no variant: Connexion would inject the handler's arguments
from the body and the parameters, and the gateway's handlers take one HandlerRequest instead.

Each run is a process of its own (bench/inprocess.py): it builds the app with its variant in
place, as `gateway serve` would, and sends `--requests` completions through it as ASGI calls, on
uvloop, the vendor answering through an in-process transport. Runs alternate between variants,
`--rounds` of each; compared is the median of CPU time per request, or with `--callgrind` of
instructions per request, counted only while the requests are served.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
from typing import Any

import uvloop

from bench import inprocess
from bench.harness import VALGRIND, collected, counted
from tests.support.provision import sqlite_database

VARIANTS: dict[str, frozenset[str]] = {
    "as built": frozenset(),
    "routing": frozenset({"routing"}),
    "key check": frozenset({"key check"}),
    "validation": frozenset({"validation"}),
}


def give_back(jobs: frozenset[str]) -> None:
    """Build the app with Connexion's own layers or handlers for `jobs` (before `create_app`)."""
    from connexion.middleware.request_validation import RequestValidationMiddleware
    from connexion.security import ApiKeySecurityHandler, BearerSecurityHandler

    from gateway.http.server import app, security
    from gateway.http.server.connexion_overrides.fixed_routes import FixedRoutes
    from gateway.http.server.connexion_overrides.prepared_validation import PreparedValidationMiddleware

    if "key check" in jobs:
        async def check(key: str, required_scopes: Any = None, request: Any = None) -> dict[str, Any]:
            return await security.authenticate(request, key, required_scopes)

        class ApiKey(ApiKeySecurityHandler):
            def _resolve_func(self, security_scheme: dict) -> Any:
                return check

        class Bearer(BearerSecurityHandler):
            def _resolve_func(self, security_scheme: dict) -> Any:
                return check

        app.SECURITY_MAP = {"apiKey": ApiKey, "bearer": Bearer}
    built = app._middlewares

    def middlewares(*args: Any, **kwargs: Any) -> list:
        stack = []
        for layer in built(*args, **kwargs):
            if "routing" in jobs and getattr(layer, "func", None) is FixedRoutes:
                continue
            if "validation" in jobs and layer is PreparedValidationMiddleware:
                layer = RequestValidationMiddleware
            stack.append(layer)
        return stack

    app._middlewares = middlewares


def main() -> int:
    parser = argparse.ArgumentParser(description="what each override of Connexion buys a request")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--callgrind", action="store_true", help="instructions, under valgrind")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # one run (a child of this bench)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        with contextlib.redirect_stderr(open(os.devnull, "w")):  # the gateway's own log lines
            give_back(VARIANTS[args.variant])
            env = {"GATEWAY_DATABASE_URL": args.db, "GATEWAY_LOG_LEVEL": "warning"}
            print(uvloop.run(inprocess.drive(env, args.requests, args.key, counted if args.callgrind else None)))
        return 0
    # Counting instructions, str hashes are the same in every run (sets and dicts then are too).
    env = {**os.environ, "PYTHONHASHSEED": "0"} if args.callgrind else None
    results: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with sqlite_database() as db:
        for _ in range(args.rounds):
            for name in VARIANTS:
                command = [sys.executable, "-m", "bench.connexion", "--variant", name, "--requests", str(args.requests),
                           "--db", db.url, "--key", db.key] + (["--callgrind"] if args.callgrind else [])
                done = subprocess.run((VALGRIND if args.callgrind else []) + command, capture_output=True,
                                      text=True, check=True, env=env)
                results[name].append(collected(done.stderr) / args.requests if args.callgrind
                                     else float(done.stdout.split()[-1]) * 1e6)
    unit = "instructions" if args.callgrind else "µs of CPU"
    print(f"cpus: {os.cpu_count()}; {args.requests} completions per run in-process, {args.rounds} runs per variant, "
          f"alternately; {unit} per request")
    base = statistics.median(results["as built"])
    print(f"{'variant':<14}{'median':>10}{'vs built':>10}{'added':>9}   runs")
    for name, values in results.items():
        median = statistics.median(values)
        print(f"{name:<14}{median:>10.0f}{median / base:>10.3f}{median - base:>9.0f}   "
              + " ".join(f"{v:.0f}" for v in values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
