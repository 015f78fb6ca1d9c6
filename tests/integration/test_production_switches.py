"""What an operator running the gateway in production relies on, as they run it (`gateway serve`,
`gateway config check`, real processes): no first-start key with GATEWAY_BOOTSTRAP=off, the
config file given by `--config`, the effective settings printed with their secrets masked, a port
in use refused before anything says "ready" or prints a key, and a configuration error of several
workers said once, in one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.support.cli import gateway_cli
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import empty_database
from tests.support.raw_http import SAFETY

VENDOR_KEY = "sk-vendor-never-shown-0123456789"


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    """`gateway ARGS` in a fresh interpreter, with no GATEWAY_* variable but those given."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True,
                          timeout=SAFETY * 2, env=clean | {"GATEWAY_VENDOR_LOCAL_ENABLED": "0", **env})


@pytest.fixture
def db_url():
    with empty_database("sqlite") as url:
        yield url


def test_bootstrap_off_creates_no_account_and_prints_no_key(db_url):
    env = {"GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_DATABASE_URL": db_url, "GATEWAY_BOOTSTRAP": "off"}
    process = GatewayProcess(env, ready_path="/healthz", separate_stdout=True)
    with process:
        pass  # it served: the database is prepared, the first-start step has run
    printed = process.stdout_path.read_text()
    assert "sk-gw-" not in printed and "sk-gw-" not in process.log() and "created account" not in printed
    assert "bootstrap is off" in printed
    assert json.loads(gateway_cli(db_url, "accounts", "list", "--format", "json").stdout) == []
    assert json.loads(gateway_cli(db_url, "keys", "list", "--format", "json").stdout) == []


def test_bootstrap_on_by_default_prints_the_first_key(db_url):
    process = GatewayProcess({"GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_DATABASE_URL": db_url},
                             ready_path="/healthz", separate_stdout=True)
    with process:
        pass
    assert "created account 'default'" in process.stdout_path.read_text()
    (key,) = json.loads(gateway_cli(db_url, "keys", "list", "--format", "json").stdout)
    assert key["accounts"] == "default"


def test_config_check_prints_the_effective_settings_with_secrets_masked(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text('[gateway]\nport = 9123\nkey_cache_seconds = 3\n\n[vendors.vllm]\nprotocol = "openai"\n'
                      'base_url = "http://127.0.0.1:9/v1"\napi_key_env = "VLLM_KEY"\n')
    done = run("config", "check", "--config", str(config), VLLM_KEY=VENDOR_KEY, GATEWAY_BOOTSTRAP="off",
               GATEWAY_DATABASE_URL="postgresql://gw:db-password@127.0.0.1:5432/gw",
               GATEWAY_REDIS_URL="redis://:redis-password@127.0.0.1:6379/0", GATEWAY_METRICS_KEY="scrape-secret")
    assert done.returncode == 0, done.stderr
    for secret in (VENDOR_KEY, "db-password", "redis-password", "scrape-secret"):
        assert secret not in done.stdout
    effective = json.loads(done.stdout)
    assert effective["port"] == 9123 and effective["key_cache_seconds"] == 3 and effective["bootstrap"] is False
    assert effective["database_url"] == "postgresql://gw:***@127.0.0.1:5432/gw"
    assert effective["redis_url"] == "redis://:***@127.0.0.1:6379/0"
    assert effective["vendors"]["vllm"]["base_url"] == "http://127.0.0.1:9/v1"
    masked = {"**********", "[redacted]"}  # a SecretStr's dump, or the log scrubber's mark on a key-shaped field
    assert {effective["vendors"]["vllm"]["api_key"], effective["metrics_key"]} <= masked


@pytest.mark.parametrize(("env", "why"), [
    ({"GATEWAY_PORTT": "1"}, "GATEWAY_PORTT: no such setting (did you mean GATEWAY_PORT?)"),
    ({"GATEWAY_BOOTSTRAP": "perhaps"}, "GATEWAY_BOOTSTRAP ([gateway] bootstrap)"),
    ({"GATEWAY_DATABASE_URL": "mysql://db/gw"}, "database_url: unsupported database 'mysql'"),
    ({"GATEWAY_VENDOR_X_PROTOCOL": "nonesuch"}, "vendor 'x'"),
])
def test_config_check_names_what_is_wrong(env, why):
    done = run("config", "check", **env)
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("gateway: configuration error: ") and why in line, line


def test_a_launchers_own_gateway_variables_are_named_and_left_alone(db_url):
    """The peer benchmark (../shared/peers/run_ours.sh) exports GATEWAY_URL, GATEWAY_CHAT_URL,
    GATEWAY_CMD... for itself, and the gateway it starts inherits them: it serves, saying so."""
    theirs = {"GATEWAY_CHAT_URL": "http://127.0.0.1:1/v5/chat/completions", "GATEWAY_NAME": "ours",
              "GATEWAY_READY_URL": "http://127.0.0.1:1/readyz", "GATEWAY_HEADERS": "x-api-key: k"}
    checked = run("config", "check", **theirs)
    assert checked.returncode == 0, checked.stderr
    assert [line.split()[1] for line in checked.stderr.splitlines()] == sorted(theirs)
    assert "GATEWAY_CHAT_URL names no setting of the gateway" in checked.stderr
    process = GatewayProcess({"GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_DATABASE_URL": db_url, **theirs},
                             ready_path="/healthz")
    with process:
        pass  # it served
    assert "GATEWAY_NAME names no setting" in process.log()


def test_serve_reads_the_config_file_given(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text("[gateway]\nno_such_setting = 1\n")
    done = run("serve", "--config", str(config), GATEWAY_DATABASE_URL=f"sqlite:///{tmp_path}/g.db")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("gateway: configuration error: unknown [gateway] settings: no_such_setting"), line


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_in_use_is_one_line_before_anything_is_ready(tmp_path, workers):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run("serve", GATEWAY_PORT=str(port), GATEWAY_WORKERS=workers,
                   GATEWAY_DATABASE_URL=f"sqlite:///{tmp_path}/g.db")
    assert done.returncode == 2 and done.stdout == ""  # no key, no "Try it" line
    assert done.stderr.splitlines() == [f"gateway: cannot listen on 127.0.0.1:{port}: Address already in use"]
    assert not (tmp_path / "g.db").exists()  # nothing was started: not even the database was made


def test_a_configuration_error_of_several_workers_is_one_line(tmp_path):
    done = run("serve", GATEWAY_PORT="0", GATEWAY_WORKERS="2", GATEWAY_DATABASE_URL="mysql://db/gw")
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.splitlines() == ["gateway: configuration error: database_url: unsupported database 'mysql' "
                                        "(use sqlite:/// or postgresql://)"]
