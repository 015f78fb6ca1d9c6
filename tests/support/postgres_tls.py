"""A PostgreSQL cluster of the test's own with `ssl = on`, from the machine's binaries
(/usr/lib/postgresql/<version>/bin): initdb and postgres on a free loopback port, run as the
`postgres` user when the tests run as root (initdb refuses root), its server certificate from a
test CA, and a pg_hba.conf that refuses every connection over TCP without TLS."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

from tests.support.fakes.server import free_port
from tests.support.processes import wait_until
from tests.support.tls import TestCA

# CERT_USER may only log in with a client certificate issued to it (its common name) by the test CA.
CERT_USER = "gateway_cert"
HBA = f"""local all all trust
hostssl all {CERT_USER} 127.0.0.1/32 cert
hostssl all all 127.0.0.1/32 trust
hostnossl all all 127.0.0.1/32 reject
"""


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def cluster_missing() -> str | None:
    """Why a TLS cluster cannot be started here (None: it can)."""
    if postgres_bin() is None:
        return "PostgreSQL's binaries are not installed (/usr/lib/postgresql/*/bin)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a postgres user for initdb"
    return None


class TlsPostgres:
    """The cluster; `url(query)` is a postgresql:// URL to its `postgres` database."""

    def __init__(self, ca: TestCA) -> None:
        self.port = free_port()
        # Its own directory outside pytest's (root's 0700 tree), which the server's user must read.
        self.root = Path(tempfile.mkdtemp(prefix="gateway-pg-tls-"))
        self.data = self.root / "data"
        issued = ca.issue(f"postgres-{self.port}", "127.0.0.1")  # not "localhost": a name it does not hold
        self.cert, self.key = self.root / "server.crt", self.root / "server.key"
        self.ca_file = self.root / "ca.pem"  # the CA client certificates are checked against
        shutil.copy(issued.cert, self.cert)
        shutil.copy(issued.key, self.key)
        shutil.copy(ca.ca_file, self.ca_file)
        self.key.chmod(0o600)
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user:
            entry = pwd.getpwnam(self._user)
            for path in (self.root, self.cert, self.key, self.ca_file):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self.proc: subprocess.Popen | None = None
        self._log = (self.root / "server.log").open("a")  # initdb's, psql's and the server's

    def url(self, query: str = "", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/postgres" + (f"?{query}" if query else "")

    def _run(self, *argv: str) -> subprocess.Popen:
        return subprocess.Popen(argv, user=self._user, cwd=self.root, stdout=subprocess.DEVNULL, stderr=self._log)

    def __enter__(self) -> TlsPostgres:
        binaries = postgres_bin()
        assert binaries is not None
        initdb = self._run(str(binaries / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                           "--no-sync", "-E", "UTF8")
        assert initdb.wait(120) == 0, self.log()
        settings = [f"port = {self.port}", "listen_addresses = '127.0.0.1'", f"unix_socket_directories = '{self.root}'",
                    "ssl = on", f"ssl_cert_file = '{self.cert}'", f"ssl_key_file = '{self.key}'",
                    f"ssl_ca_file = '{self.ca_file}'", "fsync = off",
                    "max_connections = 30"]
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(settings) + "\n")
        (self.data / "pg_hba.conf").write_text(HBA)
        self.proc = self._run(str(binaries / "postgres"), "-D", str(self.data))
        wait_until(self._listening, timeout=60, message=f"PostgreSQL with TLS on port {self.port}")
        created = self._run(str(binaries / "psql"), "-h", str(self.root), "-p", str(self.port), "-U", "postgres",
                            "-d", "postgres", "-c", f"CREATE ROLE {CERT_USER} LOGIN")
        assert created.wait(60) == 0, self.log()
        return self

    def _listening(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"postgres exited with {self.proc.returncode}: {self.log()}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text()[-3000:] if path.exists() else ""

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast" shutdown
            self.proc.wait(30)
        self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)
