"""Test certificate authorities (trustme) and what the TLS tests make of them: a CA's PEM file, a
server's certificate and key for loopback, a client's, all written under one directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme

LOOPBACK = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class Issued:
    """A certificate and its key as files (the certificate file holds its chain)."""

    cert: Path
    key: Path


class TestCA:
    """A private CA, its certificate at `ca_file`; it issues server and client certificates."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    def __init__(self, directory: Path, name: str = "ca") -> None:
        self._ca = trustme.CA(organization_name=f"Gateway test {name}")
        self._directory = directory
        self._name = name
        directory.mkdir(parents=True, exist_ok=True)
        self.ca_file = directory / f"{name}.pem"
        self._ca.cert_pem.write_to_path(str(self.ca_file))

    def issue(self, label: str, *names: str, common_name: str | None = None) -> Issued:
        """A certificate for `names` (default: loopback), usable by a server or a client."""
        issued = self._ca.issue_cert(*(names or LOOPBACK), common_name=common_name)
        cert = self._directory / f"{self._name}-{label}.crt"
        key = self._directory / f"{self._name}-{label}.key"
        cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        issued.private_key_pem.write_to_path(str(key))
        key.chmod(0o600)
        return Issued(cert, key)
