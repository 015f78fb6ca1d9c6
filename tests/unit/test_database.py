"""gateway/store/database.py: libpq's TLS parameters in a PostgreSQL URL, as asyncpg's `ssl`
(tests/integration/test_postgres_tls.py connects with them to a cluster with `ssl = on`)."""

from __future__ import annotations

import ssl

import pytest

from gateway.core.errors import ConfigError
from gateway.store import database
from gateway.store.database import postgres_tls


@pytest.mark.parametrize("mode", ["disable", "allow", "prefer", "require"])
def test_modes_that_do_not_check_the_certificate_go_to_asyncpg_as_they_are(mode):
    assert postgres_tls({"sslmode": mode}) == mode


def test_no_tls_parameter_leaves_asyncpgs_default():
    assert postgres_tls({"prepared_statement_cache_size": "16"}) is None


def test_verify_full_checks_chain_and_name_and_verify_ca_the_chain_only():
    full = postgres_tls({"sslmode": "verify-full"})
    chain = postgres_tls({"sslmode": "verify-ca"})
    assert isinstance(full, ssl.SSLContext) and isinstance(chain, ssl.SSLContext)
    assert (full.verify_mode, full.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert (chain.verify_mode, chain.check_hostname) == (ssl.CERT_REQUIRED, False)
    assert postgres_tls({"sslmode": "verify-full", "sslrootcert": "system"}).check_hostname is True


def test_require_with_a_root_certificate_is_verify_ca_as_in_libpq():
    import certifi

    context = postgres_tls({"sslmode": "require", "sslrootcert": certifi.where()})
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, False)


def test_the_tls_parameters_leave_the_url_and_become_the_ssl_argument():
    engine = database.connect("postgresql://gateway@db.internal/gateway?sslmode=require&application=x")
    try:
        assert "sslmode" not in engine.url.query and engine.url.query["application"] == "x"
    finally:
        engine.sync_engine.dispose()


@pytest.mark.parametrize(("query", "message"), [
    ("sslmode=sometimes", "sslmode: 'sometimes' is none of"),
    ("sslmode=prefer&sslrootcert=/ca.pem", "need sslmode verify-ca or verify-full"),
    ("sslcert=/client.crt", "need sslmode verify-ca or verify-full"),
    ("sslmode=verify-full&sslrootcert=/nonexistent/ca.pem", "database_url sslrootcert: not a readable PEM file"),
    ("sslmode=verify-full&sslcert=/nonexistent/c.crt", "database_url sslcert / sslkey: not a certificate"),
    ("sslmode=require&ssl=require", "either asyncpg's ssl or libpq's sslmode"),
])
def test_unusable_tls_parameters_are_config_errors_without_the_password(query, message):
    with pytest.raises(ConfigError, match=message) as caught:
        database.connect(f"postgresql://gateway:hunter2@db.internal/gateway?{query}")
    assert "hunter2" not in str(caught.value)
