"""PostgreSQL over TLS: a cluster the test starts with `ssl = on` (tests/support/postgres_tls.py),
which refuses connections without TLS, and the gateway's own engine given libpq's parameters in
its database URL: sslmode=require, verify-ca and verify-full with sslrootcert. A wrong CA or a
name the certificate does not hold is refused, never a connection made anyway; then the gateway
itself migrates, provisions and serves on it."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from sqlalchemy import text

from gateway.store import database
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.postgres_tls import CERT_USER, TlsPostgres, cluster_missing
from tests.support.provision import new_key, provision, wait_for_rows
from tests.support.tls import TestCA

pytestmark = pytest.mark.skipif(cluster_missing() is not None, reason=cluster_missing() or "")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    return TestCA(directory, "corp"), TestCA(directory, "other")


@pytest.fixture(scope="module")
def cluster(pki):
    with TlsPostgres(pki[0]) as running:
        yield running


async def encrypted(url: str) -> bool:
    """Whether the gateway's engine at `url` reaches the server, over TLS (pg_stat_ssl's word)."""
    engine = database.connect(url)
    try:
        async with engine.connect() as connection:
            return (await connection.execute(text("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"))).scalar()
    finally:
        await engine.dispose()


@pytest.mark.parametrize("query", ["sslmode=require", "sslmode=verify-ca&sslrootcert={ca}",
                                   "sslmode=verify-full&sslrootcert={ca}", "sslmode=require&sslrootcert={ca}"])
def test_libpq_tls_parameters_in_the_url_connect_over_tls(cluster, pki, query):
    assert asyncio.run(encrypted(cluster.url(query.format(ca=pki[0].ca_file)))) is True


def test_the_server_refuses_plaintext_so_the_tls_above_was_needed(cluster):
    with pytest.raises(Exception, match="no encryption|pg_hba.conf rejects"):
        asyncio.run(encrypted(cluster.url("sslmode=disable")))


@pytest.mark.parametrize(("query", "why"), [
    ("sslmode=verify-full&sslrootcert={other}", "certificate verify failed"),
    ("sslmode=verify-ca&sslrootcert={other}", "certificate verify failed"),
    ("sslmode=verify-full", "certificate verify failed"),  # the system's CAs know nothing of the test's
])
def test_a_certificate_not_trusted_is_refused(cluster, pki, query, why):
    with pytest.raises(Exception, match=why):
        asyncio.run(encrypted(cluster.url(query.format(other=pki[1].ca_file))))


def test_verify_full_checks_the_host_name_and_verify_ca_does_not(cluster, pki):
    # The same server by a name its certificate does not hold (it holds 127.0.0.1 only).
    ca = pki[0].ca_file
    renamed = cluster.url(f"sslmode=verify-full&sslrootcert={ca}").replace("@127.0.0.1:", "@localhost:")
    with pytest.raises(Exception, match="certificate verify failed: Hostname mismatch"):
        asyncio.run(encrypted(renamed))
    assert asyncio.run(encrypted(renamed.replace("verify-full", "verify-ca"))) is True


def test_verify_full_without_sslrootcert_uses_the_systems_cas_which_ssl_cert_file_names(cluster, pki, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(pki[0].ca_file))  # read by OpenSSL when the context is made
    assert asyncio.run(encrypted(cluster.url("sslmode=verify-full"))) is True


def test_a_client_certificate_logs_in_a_user_the_server_admits_by_certificate_only(cluster, pki):
    ca = pki[0]
    client = ca.issue("pg-client", "gateway.client", common_name=CERT_USER)  # PostgreSQL's `cert` method: the common name is the user
    with_cert = f"sslmode=verify-full&sslrootcert={ca.ca_file}&sslcert={client.cert}&sslkey={client.key}"
    assert asyncio.run(encrypted(cluster.url(with_cert, user=CERT_USER))) is True
    with pytest.raises(Exception, match="certificate"):
        asyncio.run(encrypted(cluster.url(f"sslmode=verify-full&sslrootcert={ca.ca_file}", user=CERT_USER)))


def test_the_gateway_migrates_provisions_and_serves_over_verified_tls(cluster, pki, upstream):
    url = cluster.url(f"sslmode=verify-full&sslrootcert={pki[0].ca_file}")
    provision(url)  # the CLI: migrations, an account, keys
    key, _, account = new_key(url)
    with GatewayProcess(gateway_env(upstream.url, url)) as gateway:
        r = httpx.post(f"{gateway.url}/v5/completions", headers={"x-api-key": key}, verify=SHARED_TLS, timeout=30,
                       json={"model": "fake/m", "prompt": "x", "max_tokens": 2})
        assert r.status_code == 200, r.text
        assert len(wait_for_rows(url, account, 1)) == 1


def test_a_gateway_given_the_wrong_ca_stops_in_one_line_saying_why(cluster, pki, upstream):
    url = cluster.url(f"sslmode=verify-full&sslrootcert={pki[1].ca_file}")
    with pytest.raises(RuntimeError, match="gateway exited") as caught:
        GatewayProcess(gateway_env(upstream.url, url), ready_timeout=60).start()
    lines = [line for line in str(caught.value).splitlines() if "certificate verify failed" in line]
    assert lines and "Traceback" not in str(caught.value), str(caught.value)[-2000:]
