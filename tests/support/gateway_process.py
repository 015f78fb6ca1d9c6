"""Start the real gateway (`gateway serve`, uvicorn) in a subprocess for a test session."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support import launcher
from tests.support.environments import SHARED_TLS
from tests.support.fakes.server import free_port

ROOT = Path(__file__).resolve().parents[2]


class GatewayProcess:
    def __init__(self, env: dict[str, str], port: int | None = None, ready_timeout: float = 60.0,
                 ready_path: str = "/readyz", cwd: Path = ROOT, module: str = "gateway",
                 separate_stdout: bool = False, python: str = sys.executable) -> None:
        self.port = port or free_port()
        self.env = {**os.environ, "GATEWAY_PORT": str(self.port), "GATEWAY_HOST": "127.0.0.1", **env}
        self.ready_timeout = ready_timeout
        self.ready_path = ready_path  # /healthz: serving, whether or not its vendors are ready
        self.cwd = cwd  # the installed-wheel test runs it outside the checkout
        self.module = module  # tests/support/clocked_gateway.py: the same command, on a clock the test moves
        self.python = python  # bench --against: another checkout's own virtual environment
        self.proc: subprocess.Popen | launcher.LaunchedProcess | None = None
        self.log_path = ROOT / "var" / f"gateway-{self.port}.log"
        # The log alone (standard error), with what the gateway prints for people in stdout_path.
        self.stdout_path = ROOT / "var" / f"gateway-{self.port}.out" if separate_stdout else None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GatewayProcess:
        self.log_path.parent.mkdir(exist_ok=True)
        self._log = self.log_path.open("w")
        self._out = self.stdout_path.open("w") if self.stdout_path else None
        argv = [self.python, "-m", self.module, "serve"]
        stdout, stderr = self._out or self._log, self._log
        # Forked from a launcher that has imported the gateway already (tests/support/launcher.py), where
        # it can be exactly this command; else a fresh interpreter.
        self.proc = launcher.launch(argv, self.env, self.cwd, stdout.fileno(), stderr.fileno()) or subprocess.Popen(
            argv, env=self.env, cwd=self.cwd, stdout=stdout, stderr=stderr)
        deadline = time.monotonic() + self.ready_timeout
        # One client for every poll, on the tests' shared TLS context: httpx builds one (and loads
        # its certificate store) per client otherwise, which costs more CPU than a poll.
        with httpx.Client(timeout=1, verify=SHARED_TLS) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n{self.log()}")
                try:
                    if http.get(f"{self.url}{self.ready_path}").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"gateway not ready in {self.ready_timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def stop(self, timeout: float = 30) -> int | None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        if self._out:
            self._out.close()
        return self.proc.returncode if self.proc else None

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
