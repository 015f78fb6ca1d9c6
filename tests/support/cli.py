"""Accounts and the `gateway` command as an operator runs it."""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass

from gateway import cli
from tests.support.gateway_process import ROOT


def fresh_account() -> str:
    return f"acct-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def gateway_cli(db_url: str, *args: str) -> CliResult:
    """`gateway ARGS...` on the database at `db_url`, run in this process (the console script's
    own entry point, `gateway.cli.main`); tests/integration/test_cli.py runs the installed script once."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args), env={"GATEWAY_DATABASE_URL": db_url})
        except SystemExit as exc:  # argparse refuses the arguments
            code = exc.code if isinstance(exc.code, int) else 1
    return CliResult(code, out.getvalue(), err.getvalue())


def console_script(db_url: str, *args: str) -> CliResult:
    """The installed `gateway` console script (next to this interpreter), as an operator runs it,
    on this checkout's code."""
    script = os.path.join(os.path.dirname(sys.executable), "gateway")
    env = {**os.environ, "GATEWAY_DATABASE_URL": db_url, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([script, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)
    return CliResult(done.returncode, done.stdout, done.stderr)
