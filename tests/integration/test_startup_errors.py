"""A gateway that cannot start says why in one line, never with a traceback: a config file that is
not text, and a database it cannot reach (`gateway serve` as an operator runs it)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.support.raw_http import SAFETY


def serve(tmp_path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    return subprocess.run([sys.executable, "-m", "gateway", "serve"], capture_output=True, text=True, timeout=SAFETY * 2,
                          env=clean | {"GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_PORT": "0",
                                       "GATEWAY_DATABASE_URL": f"sqlite:///{tmp_path}/g.db", **env})


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
