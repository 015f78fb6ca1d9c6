"""The administration's commands as README.md and docs/operations.md write them, read from the docs
(so the test follows them when they change) and run as written on a fresh database, in a directory
of their own like a fresh clone's (the default `sqlite:///var/gateway.db`, no `var/` yet), by the
installed `gateway` command. A synopsis's optional parts (`[...]`) are left out, and a key id the
docs show (`key_…`) stands for the key their own `keys create` made last."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.environments import SHARED_TLS
from tests.support.gateway_process import ROOT, GatewayProcess
from tests.support.raw_http import SAFETY

OPTIONAL = re.compile(r"\[[^\]]*\]")
KEY_ID = re.compile(r"\bkey_[0-9a-f]{16}\b")


def commands(doc: str, heading: str) -> list[str]:
    """The `gateway` commands of the code blocks under `heading` (up to the next heading of its
    level), each with its continuation lines, its comments and optional parts left out."""
    text = (ROOT / doc).read_text()
    level = heading.split(" ", 1)[0]
    section = text.split(f"\n{heading}\n", 1)[1].split(f"\n{level} ", 1)[0]
    found: list[str] = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL):
        for line in block.splitlines():
            words = shlex.join(shlex.split(OPTIONAL.sub("", line), comments=True))
            if line.startswith("gateway "):
                found.append(words)
            elif line[:1].isspace() and words and found:
                found[-1] += " " + words
    assert found, f"no gateway command under {heading!r} in {doc}"
    return found


def run_as_written(lines: list[str], cwd: Path) -> list[subprocess.CompletedProcess]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    script = os.path.join(os.path.dirname(sys.executable), "gateway")
    made: str | None = None
    done = []
    for line in lines:
        argv = shlex.split(KEY_ID.sub(lambda _: made or "no key made yet", line))
        result = subprocess.run([script, *argv[1:]], cwd=cwd, env=env | {"PYTHONPATH": str(ROOT)},
                                capture_output=True, text=True, timeout=SAFETY * 4)
        assert result.returncode == 0, f"`{line}` failed on a fresh database:\n{result.stderr}"
        if argv[1:3] == ["keys", "create"]:
            made = KEY_ID.search(result.stdout).group()  # its id, printed in either format
        done.append(result)
    return done


def test_the_first_admin_key_is_made_as_operations_md_says_and_administers(tmp_path):
    lines = commands("docs/operations.md", "## Administration")
    done = run_as_written(lines, tmp_path)
    (key,) = [json.loads(result.stdout)["key"] for line, result in zip(lines, done, strict=True)
              if "--scope admin" in line]
    url = f"sqlite:///{tmp_path / 'var' / 'gateway.db'}"
    with GatewayProcess({"GATEWAY_DATABASE_URL": url, "GATEWAY_VENDOR_LOCAL_ENABLED": "0"}, cwd=tmp_path) as gateway, \
            httpx.Client(base_url=gateway.url, headers={"x-api-key": key}, verify=SHARED_TLS) as client:
        answer = client.get("/v5/admin/accounts")
    assert answer.status_code == 200, answer.text


def test_the_readmes_accounts_and_keys_commands_work_as_written(tmp_path):
    lines = commands("README.md", "## Accounts, API keys and usage")
    assert any(line.startswith("gateway keys rotate") for line in lines)
    run_as_written(lines, tmp_path)
