"""`make fuzz`: schemathesis (CLI, all checks) against a live gateway in front of a fake vendor.

    python -m tests.fuzz [--max-examples N] [extra schemathesis args...]

Exit status is schemathesis's: 0 when it found nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from tests.fakes.openai_upstream import FakeOpenAI
from tests.fakes.server import ServerThread
from tests.gateway_process import ROOT, GatewayProcess
from tests.provision import sqlite_database
from tests.support import gateway_env

# The schemathesis command of the environment running this (the virtualenv's, next to its python).
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


def fuzz(max_examples: int, extra: list[str]) -> int:
    """A gateway in front of a fake vendor, on a fresh database, fuzzed."""
    with (sqlite_database() as db, ServerThread(FakeOpenAI()) as upstream,
          GatewayProcess(gateway_env(upstream.url, db.url)) as gateway):
        return schemathesis_run(gateway.url, db.key, max_examples, extra)


def schemathesis_run(url: str, key: str, max_examples: int, extra: list[str]) -> int:
    """Schemathesis against the gateway at `url` (made with tests/support.py's gateway_env), with
    `key` granting acct-a; its exit status."""
    command = [
        str(SCHEMATHESIS), "run", str(ROOT / "openapi.json"),
        "--url", url, "-H", f"x-api-key: {key}", "-H", "x-selected-account-id: acct-a",
        "--checks", "all", "--max-examples", str(max_examples), "--no-color", *extra,
    ]  # fmt: skip
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.fuzz_hooks", "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, env=env, cwd=ROOT, check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-examples", type=int, default=200)
    args, extra = parser.parse_known_args()
    return fuzz(args.max_examples, extra)


if __name__ == "__main__":
    sys.exit(main())
