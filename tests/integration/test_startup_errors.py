"""A gateway that cannot start says why in one line, never with a traceback: a config file that is
not text, and a database it cannot reach (`gateway serve` as an operator runs it). And a gateway
whose contract is not its handlers' (an operation without a handler, a handler without its
operation) does not start, naming the operation, nor passes `gateway config check`; nor does one
whose contract Connexion cannot assemble (it would answer every path with a 500)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

from tests.support.raw_http import SAFETY


def serve(tmp_path, *command: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """`gateway serve` (or `gateway <command>`) run to its end, from `cwd`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    return subprocess.run([sys.executable, "-m", "gateway", *(command or ("serve",))], capture_output=True, text=True,
                          timeout=SAFETY * 2, cwd=cwd,
                          env=clean | {"GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_PORT": "0",
                                       "GATEWAY_DATABASE_URL": f"sqlite:///{tmp_path}/g.db", **env})


def with_contract(tmp_path, change: Callable[[dict], None]) -> Path:
    """A directory to run the gateway from with its contract changed by `change`: a copy of the
    installed `generated` package (the models and openapi.json, which the gateway serves), found
    before the installed one (`python -m` puts the working directory first on the path)."""
    build = tmp_path / "build"
    shutil.copytree(Path(str(files("generated"))), build / "generated", ignore=shutil.ignore_patterns("__pycache__"))
    contract = build / "generated" / "openapi.json"
    spec = json.loads(contract.read_text())
    change(spec)
    contract.write_text(json.dumps(spec))
    return build


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens on it once closed


def test_a_binary_config_file_is_one_line(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_bytes(bytes(range(256)))
    done = serve(tmp_path, GATEWAY_CONFIG=str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"gateway: configuration error: cannot read config file {config}: "
                                                "not UTF-8 text (byte 128); a TOML file is expected"]


def test_an_unreachable_database_is_one_line(tmp_path):
    done = serve(tmp_path, GATEWAY_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{closed_port()}/nothing")
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 2 and "cannot open the database postgresql" in errors[0] and "refused" in errors[0]
    assert errors[1].endswith("Application startup failed. Exiting.")  # uvicorn's own


def test_an_operation_without_a_handler_stops_the_start_naming_it(tmp_path):
    def widgets(spec: dict) -> None:
        spec["paths"]["/v5/widgets"] = {"get": {"operationId": "GET-V5-/v5/widgets",
                                                "responses": {"200": {"description": "Widgets"}}}}

    build = with_contract(tmp_path, widgets)
    why = ("the contract and the handlers differ: openapi.json has operation 'GET-V5-/v5/widgets' but handlers/ "
           "has no handler for it")
    done = serve(tmp_path, cwd=build)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [f"gateway: configuration error: {why}"]
    checked = serve(tmp_path, "config", "check", cwd=build)
    assert checked.returncode == 1 and checked.stderr.strip().splitlines() == [f"gateway: configuration error: {why}"]


def test_a_handler_without_its_operation_stops_the_start_naming_it(tmp_path):
    build = with_contract(tmp_path, lambda spec: spec["paths"].pop("/v5/admin/audit"))
    done = serve(tmp_path, cwd=build)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "gateway: configuration error: the contract and the handlers differ: handlers/ has a handler for "
        "'GET-V5-/v5/admin/audit', an operation openapi.json does not have: remove it with its operation"]
    assert serve(tmp_path, "config", "check", cwd=build).returncode == 1


def test_a_contract_connexion_cannot_assemble_stops_the_start(tmp_path):
    """An operation whose security names a scheme the contract lacks: Connexion fails to assemble
    the operations as the app starts (before: uvicorn took it for an app without a lifespan,
    served, and answered every path, /healthz too, with a 500)."""
    def unknown_scheme(spec: dict) -> None:
        spec["paths"]["/v5/usage"]["get"]["security"] = [{"NoSuchScheme": []}]

    done = serve(tmp_path, cwd=with_contract(tmp_path, unknown_scheme))
    assert done.returncode == 3, done.stderr
    assert "NoSuchScheme" in done.stderr and done.stderr.strip().endswith("Application startup failed. Exiting.")
