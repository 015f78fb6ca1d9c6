"""Debian's redis-server over TLS only (`--port 0 --tls-port`), on a free port, with a certificate
a test CA issued, asking clients for theirs or not; for the rediss:// tests."""

from __future__ import annotations

import socket
import ssl
import subprocess

from tests.support.fakes.server import free_port
from tests.support.processes import wait_until
from tests.support.tls import TestCA


class TlsRedisServer:
    def __init__(self, ca: TestCA, *, auth_clients: bool) -> None:
        self.ca = ca
        self.port = free_port()
        self.server = ca.issue(f"redis-{self.port}")
        self.auth_clients = auth_clients
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> TlsRedisServer:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
             "--tls-cert-file", str(self.server.cert), "--tls-key-file", str(self.server.key),
             "--tls-ca-cert-file", str(self.ca.ca_file), "--tls-auth-clients", "yes" if self.auth_clients else "no",
             "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._listening, message=f"redis-server with TLS on port {self.port}")
        return self

    def _listening(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {self.proc.returncode} (built without TLS?)")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def plaintext_answer(self) -> bytes:
        """What the server says to a PING sent without TLS (nothing a client could take for PONG)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            try:
                return s.recv(100)
            except (ConnectionError, TimeoutError, ssl.SSLError):
                return b""

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
