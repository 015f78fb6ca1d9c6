"""examples/gateway.toml, the configuration a new user copies: `gateway config check` takes it as
written (a fresh interpreter, no GATEWAY_* variable, the keys it names set), and it shows every
vendor protocol, the OpenAI-compatible servers, aliases and fallbacks, each table with its comment."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gateway.vendors.registry import PROTOCOLS
from tests.support.gateway_process import ROOT
from tests.support.raw_http import SAFETY

EXAMPLE = ROOT / "examples" / "gateway.toml"
KEYS = {"OPENAI_API_KEY": "sk-example-openai", "ANTHROPIC_API_KEY": "sk-ant-example", "GEMINI_API_KEY": "AIza-example",
        "VLLM_API_KEY": "example-vllm-key"}


def check(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_") and k not in KEYS}
    return subprocess.run([sys.executable, "-m", "gateway", "config", "check", "--config", str(EXAMPLE)],
                          capture_output=True, text=True, timeout=SAFETY * 2, cwd=ROOT, env=clean | env)


def test_the_example_passes_config_check_with_every_kind_of_vendor():
    done = check(**KEYS)
    assert done.returncode == 0, done.stderr
    assert not any(key in done.stdout for key in KEYS.values())
    effective = json.loads(done.stdout)
    vendors = effective["vendors"]
    assert {vendor["protocol"] for vendor in vendors.values()} == set(PROTOCOLS)
    servers = {vendor["options"].get("server") for vendor in vendors.values() if vendor["protocol"] == "openai"}
    assert {"vllm", "llama.cpp", "ollama"} <= servers
    assert vendors["openai"]["base_url"] == "https://api.openai.com/v1"
    assert effective["aliases"]["gpt-4o"] == "openai/gpt-4o" and len(effective["aliases"]) >= 2
    assert effective["fallbacks"]["openai/gpt-4o"] and effective["prices"]


def test_each_table_of_the_example_says_what_it_is():
    lines = EXAMPLE.read_text().splitlines()
    tables = [i for i, line in enumerate(lines) if line.startswith("[")]
    assert len(tables) >= len(PROTOCOLS) + 3
    for i in tables:
        if lines[i] != "[gateway]":
            assert lines[i - 1].startswith("# "), f"{lines[i]} has no comment above it"


def test_a_key_the_example_names_must_be_set():
    done = check(**{name: value for name, value in KEYS.items() if name != "VLLM_API_KEY"})
    assert done.returncode == 1 and done.stdout == ""
    assert "environment variable VLLM_API_KEY is not set" in done.stderr
