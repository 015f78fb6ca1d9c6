"""`make fuzz`: schemathesis (CLI, all checks, and tests/contract/fuzz_hooks.py's) against a live gateway in
front of each vendor protocol in turn: the fakes of OpenAI, Anthropic and Gemini (tests/support/fakes), and
the real embedded model. Completions and chat go through every protocol; the OpenAI run takes every
operation of the contract, each called with a key that holds the scope its security requirement names.

    python -m tests.contract.fuzz [--protocol P ...] [--seed S] [--max-examples N] [extra schemathesis args...]

Prints each protocol's cases and outcome (and the seed, to run it again); exit status 0 when no run found
anything. The suite runs a short fuzz per protocol with the same targets and a fixed seed
(test_contract.py, test_vendor_anthropic.py, test_vendor_gemini.py, test_local.py).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.environments import (
    ANTHROPIC_SECRET,
    GEMINI_SECRET,
    LOCAL_MODEL,
    SHARED_TLS,
    gateway_env,
    local_env,
)
from tests.support.fakes.anthropic_upstream import FakeAnthropic
from tests.support.fakes.gemini_upstream import FakeGemini
from tests.support.fakes.openai_upstream import FakeOpenAI
from tests.support.fakes.server import ServerThread
from tests.support.gateway_process import ROOT, GatewayProcess
from tests.support.provision import run_cli, sqlite_database

# The schemathesis command of the environment running this (the virtualenv's, next to its python).
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
CONFIG = ROOT / "tests" / "contract" / "fuzz.toml"
# What depends on the vendor: completions and chat (the other operations are the OpenAI run's).
INFERENCE = ["--include-path", "/v5/completions", "--include-path", "/v5/chat/completions"]
SCOPES = ("inference", "usage", "admin")  # openapi.json's, as its operations' security requirements name them
# The suite's runs are reproducible from their seed alone: no example database, so nothing found by
# an earlier run on this machine is replayed (CI's fresh clone has none), and Hypothesis skips the
# upkeep of its Pareto front of examples, kept only for that database and much of a short run's CPU.
# `make fuzz` keeps the database in .hypothesis/.
REPRODUCIBLE = ["--seed", "1", "--generation-database", "none"]
# The suite's short run of a protocol: 200 generated completion cases. `make fuzz` adds the coverage
# phase (every boundary value, each kind of invalid value) and far more examples.
SHORT = ["--phases", "fuzzing", "--max-examples", "100", *REPRODUCIBLE]


@dataclass(frozen=True)
class Target:
    """One protocol's fuzz: the vendor as tests/contract/fuzz_hooks.py reads it (FUZZ_VENDOR), the fake it
    fronts, and the gateway environment that configures it (from the fake's URL and the database's)."""

    vendor: dict[str, Any]
    fake: Callable[[], Any] | None
    env: Callable[[str, str], dict[str, str]]
    operations: list[str] = field(default_factory=lambda: INFERENCE)
    short: list[str] = field(default_factory=lambda: SHORT)
    long: int = 1000  # `make fuzz`: examples per operation and phase, after the coverage phase


def _vendor_env(name: str, protocol: str, base_url: str, key: str, db_url: str, **options: str) -> dict[str, str]:
    prefix = f"GATEWAY_VENDOR_{name.upper()}_"
    return {"GATEWAY_DATABASE_URL": db_url, "GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_VALIDATE_RESPONSES": "1",
            prefix + "PROTOCOL": protocol, prefix + "BASE_URL": base_url, prefix + "API_KEY": key,
            **{prefix + option.upper(): value for option, value in options.items()}}  # fmt: skip


def _vendor(name: str, protocol: str, model: str, options: dict[str, str] | None = None,
            **limits: int) -> dict[str, Any]:
    return {"name": name, "protocol": protocol, "options": options or {}, "model": model, "limits": limits}


TARGETS: dict[str, Target] = {
    # Every operation of the contract, each with a key of its scope, on a gateway and database of its
    # own (its stateful phase revokes and rotates the keys it lists); every phase in the suite's short
    # run too (coverage: every boundary value of every operation).
    # The fake's own timeouts are the suite's short ones: a busy machine gets the long defaults here.
    "openai": Target(_vendor("fake", "openai", "fake/fuzz-model", {"server": "openai"}), FakeOpenAI,
                     lambda url, db: gateway_env(url, db, GATEWAY_VENDOR_FAKE_FIRST_BYTE="30",
                                                 GATEWAY_VENDOR_FAKE_IDLE="30"),
                     operations=[], short=["--max-examples", "20", *REPRODUCIBLE]),
    "anthropic": Target(_vendor("anthropic", "anthropic", "anthropic/claude-fuzz"), FakeAnthropic,
                        lambda url, db: _vendor_env("anthropic", "anthropic", url, ANTHROPIC_SECRET, db)),
    # Four candidates per call: n is native up to 4, fanned out beyond.
    "gemini": Target(_vendor("gemini", "gemini", "gemini/gemini-fuzz", {"max_candidates": "4"}), FakeGemini,
                     lambda url, db: _vendor_env("gemini", "gemini", f"{url}/v1beta", GEMINI_SECRET, db,
                                                 max_candidates="4")),
    # The real model: a few short generations per case (completions and chat), short prompts and
    # messages, token ids of its vocabulary.
    "local": Target(_vendor("local", "local", LOCAL_MODEL, max_tokens=2, prompt_chars=8, scored_prompt_chars=3,
                            prompts=2, choices=2, vocabulary=49152, messages=2, message_chars=8), None,
                    lambda url, db: local_env(db), long=300),
}


@dataclass(frozen=True)
class Outcome:
    returncode: int  # schemathesis's: 0 when it found nothing
    # Calls by "<mode> <status>" (POST /v5/completions), "chat <mode> <status>", "admin <...>" (/v5/admin/)
    # and "other <...>" (the rest): fuzz_hooks.py's `after_call`.
    calls: collections.Counter[str]

    @property
    def cases(self) -> int:
        return sum(self.calls.values())

    def summary(self) -> str:
        found = "no issues" if self.returncode == 0 else f"FAILED (schemathesis exit {self.returncode})"
        return f"{self.cases} cases, {found}: " + ", ".join(
            f"{count} {kind}" for kind, count in sorted(self.calls.items()))


def short_fuzz(protocol: str, url: str, keys: str | dict[str, str]) -> Outcome:
    """The suite's short run of `protocol` against the gateway at `url` (one that configures the
    protocol's vendor as TARGETS says), with its keys (`scoped_keys`; one key: an inference key)."""
    target = TARGETS[protocol]
    return schemathesis_run(url, keys, target, target.short)


def scoped_keys(database_url: str, gateway_url: str) -> dict[str, str]:
    """A key per scope, each granting acct-a and holding that scope alone: the admin key made with the
    CLI (as the first one is), the others with it over HTTP."""
    made = run_cli(database_url, "keys", "create", "--account", "acct-a", "--name", "fuzz admin", "--scope", "admin",
                   "--format", "json")
    admin = json.loads(made)["key"]
    keys = {"admin": admin}
    with httpx.Client(base_url=gateway_url, headers={"x-api-key": admin}, timeout=30, verify=SHARED_TLS) as client:
        for scope in SCOPES[:-1]:
            answer = client.post("/v5/admin/keys", json={"accounts": ["acct-a"], "name": f"fuzz {scope}",
                                                         "scopes": [scope]})
            assert answer.status_code == 201, answer.text
            keys[scope] = answer.json()["key"]
    return keys


def schemathesis_run(url: str, keys: str | dict[str, str], target: Target, args: list[str]) -> Outcome:
    """Schemathesis against the gateway at `url` (configured as `target` says), with a key per scope
    granting acct-a (fuzz_hooks.py gives each operation the key its scope needs); its exit status,
    and what the operations answered."""
    keys = {"inference": keys} if isinstance(keys, str) else keys
    with tempfile.NamedTemporaryFile("r", suffix=".fuzz-stats") as stats:
        command = [
            str(SCHEMATHESIS), "--config-file", str(CONFIG), "run", str(ROOT / "openapi.json"),
            "--url", url, "-H", "x-selected-account-id: acct-a",
            "--checks", "all", "--no-color", *target.operations, *args,
        ]  # fmt: skip
        env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.contract.fuzz_hooks", "PYTHONPATH": str(ROOT),
               "FUZZ_VENDOR": json.dumps(target.vendor), "FUZZ_STATS": stats.name, "FUZZ_KEYS": json.dumps(keys)}
        returncode = subprocess.run(command, env=env, cwd=ROOT, check=False).returncode
        calls = collections.Counter(line.strip() for line in stats if line.strip())
    return Outcome(returncode, calls)


@contextlib.contextmanager
def running(target: Target) -> Iterator[tuple[str, dict[str, str]]]:
    """A fresh database, the target's fake (if any) and a gateway in front of it: (gateway URL, a key
    per scope)."""
    with sqlite_database() as db, contextlib.ExitStack() as stack:
        upstream = stack.enter_context(ServerThread(target.fake())).url if target.fake else ""
        gateway = stack.enter_context(GatewayProcess(target.env(upstream, db.url)))
        yield gateway.url, scoped_keys(db.url, gateway.url)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", action="append", choices=list(TARGETS), help="default: every protocol")
    parser.add_argument("--seed", type=int, help="default: a new one, printed (the suite's runs keep 1)")
    parser.add_argument("--max-examples", type=int, help="default: 1000 (300 for the real model)")
    args, extra = parser.parse_known_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    outcomes = {}
    for protocol in args.protocol or TARGETS:
        with running(TARGETS[protocol]) as (url, keys):
            examples = args.max_examples or TARGETS[protocol].long
            outcomes[protocol] = schemathesis_run(url, keys, TARGETS[protocol],
                                                  ["--seed", str(seed), "--max-examples", str(examples), *extra])
    for protocol, outcome in outcomes.items():
        print(f"fuzz {protocol} (seed {seed}): {outcome.summary()}")
    return max(outcome.returncode for outcome in outcomes.values())


if __name__ == "__main__":
    sys.exit(main())
