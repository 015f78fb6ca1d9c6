"""Debian's tinyproxy, started by a test as its own process on a free loopback port with its own
configuration, and its log read to see what went through it."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path

from tests.support.fakes.server import free_port
from tests.support.processes import wait_until


def tinyproxy_missing() -> str | None:
    """Why the proxy tests cannot run here (None: they can)."""
    return None if shutil.which("tinyproxy") else "tinyproxy is not installed (apt-get install -y tinyproxy)"


class Tinyproxy:
    """tinyproxy allowing loopback clients, CONNECT to `connect_ports` only, and, with
    `credentials` ("user:password"), only clients that give them (BasicAuth)."""

    def __init__(self, directory: Path, connect_ports: tuple[int, ...], credentials: str | None = None) -> None:
        self.port = free_port()
        self.log_path = directory / f"tinyproxy-{self.port}.log"
        lines = [f"Port {self.port}", "Listen 127.0.0.1", "Timeout 60", f'LogFile "{self.log_path}"',
                 "LogLevel Connect", "MaxClients 64", "Allow 127.0.0.1", "DisableViaHeader Yes",
                 *(f"ConnectPort {port}" for port in connect_ports)]
        if credentials:
            user, _, password = credentials.partition(":")
            lines.append(f"BasicAuth {user} {password}")
        self.config_path = directory / f"tinyproxy-{self.port}.conf"
        self.config_path.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen | None = None

    def url(self, credentials: str | None = None) -> str:
        return f"http://{credentials + '@' if credentials else ''}127.0.0.1:{self.port}"

    def __enter__(self) -> Tinyproxy:
        self.proc = subprocess.Popen(["tinyproxy", "-d", "-c", str(self.config_path)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_until(self._listening, message=f"tinyproxy on port {self.port}")
        return self

    def _listening(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"tinyproxy exited with {self.proc.returncode}: {self.log()}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                # tinyproxy finishes the connections it serves before it exits on SIGTERM; a client
                # pool's idle connection to it may keep it for as long as the pool does.
                self.proc.kill()
                self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def requests(self) -> list[str]:
        """The request lines clients sent it ("CONNECT 127.0.0.1:8443 HTTP/1.1", "POST http://...")."""
        return re.findall(r"Request \(file descriptor \d+\): (.+)", self.log())
