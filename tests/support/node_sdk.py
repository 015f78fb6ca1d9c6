"""Running a script of tests/node (the openai Node SDK, installed by `make install` when npm is
there) against a live gateway, and reading what it printed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import pytest

from tests.support.gateway_process import ROOT

NODE_TESTS = ROOT / "tests" / "node"


def run_script(script: str, request: dict[str, Any], gateway_url: str, key: str) -> Any:
    """The JSON the script printed for `request` (argv[2]); the test is skipped without node and npm."""
    tools = {name: shutil.which(name) for name in ("node", "npm")}
    if None in tools.values():
        missing = ", ".join(name for name, path in tools.items() if path is None)
        pytest.skip(f"the openai Node SDK tests need node and npm on PATH (missing: {missing})")
    assert (NODE_TESTS / "node_modules" / "openai").is_dir(), "npm is there, tests/node is not installed: make install"
    done = subprocess.run([tools["node"], str(NODE_TESTS / script), json.dumps(request)], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "GATEWAY_URL": gateway_url, "GATEWAY_KEY": key})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
