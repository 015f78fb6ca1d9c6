"""rediss:// against Debian's redis-server speaking TLS only, with certificates from a test CA:
the CA and a client certificate from the URL's query (redis-py's names), through the gateway's
own RESP client and its limits' counters. A wrong CA or a missing client certificate is one
clear RedisUnavailable (the limits' Redis-down policy then applies); nothing falls back to
plaintext."""

from __future__ import annotations

import asyncio
import shutil

import httpx
import pytest

from gateway.core.errors import ConfigError
from gateway.limits.redis_counters import RedisCounters
from gateway.store.resp import Redis, RedisUnavailable
from tests.support.clocks import FileClock
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import empty_database, new_key, provision, run_cli
from tests.support.redis_servers import redis_prefix
from tests.support.redis_tls import TlsRedisServer
from tests.support.tls import TestCA

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    return TestCA(directory, "corp"), TestCA(directory, "other")


@pytest.fixture(scope="module")
def mutual(pki):
    """A Redis that asks every client for a certificate its CA issued."""
    with TlsRedisServer(pki[0], auth_clients=True) as server:
        yield server


@pytest.fixture(scope="module")
def one_way(pki):
    with TlsRedisServer(pki[0], auth_clients=False) as server:
        yield server


@pytest.fixture(scope="module")
def client_cert(pki):
    return pki[0].issue("gateway-client", "gateway")


def url(server: TlsRedisServer, scheme: str = "rediss", **query: str) -> str:
    return f"{scheme}://127.0.0.1:{server.port}/0" + ("?" + "&".join(f"{k}={v}" for k, v in query.items())
                                                      if query else "")


async def ping(address: str) -> str:
    redis = Redis(address, connect_timeout=5, timeout=5)
    try:
        return await redis.call("PING")
    finally:
        await redis.close()


def test_a_client_certificate_and_ca_from_the_query_reach_a_redis_that_asks_for_them(mutual, pki, client_cert):
    address = url(mutual, ssl_ca_certs=pki[0].ca_file, ssl_certfile=client_cert.cert, ssl_keyfile=client_cert.key,
                  ssl_cert_reqs="required")
    assert asyncio.run(ping(address)) == "PONG"

    async def counters() -> str:
        store = RedisCounters(address, "gateway-test-tls:")
        try:
            await store.ping()
            return await store.client.call("SET", "gateway-test-tls:k", "v")
        finally:
            await store.client.call("DEL", "gateway-test-tls:k")
            await store.close()

    assert asyncio.run(counters()) == "OK"


def test_a_redis_that_does_not_ask_for_a_certificate_needs_only_the_ca(one_way, pki):
    assert asyncio.run(ping(url(one_way, ssl_ca_certs=pki[0].ca_file))) == "PONG"


def test_without_ssl_ca_certs_the_systems_cas_are_used_and_ssl_cert_file_names_them(one_way, pki, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(pki[0].ca_file))  # read by OpenSSL when the context is made
    assert asyncio.run(ping(url(one_way))) == "PONG"


def test_a_wrong_ca_is_one_clear_error(one_way, pki):
    # (redis-server sends its CA with its certificate: OpenSSL then calls the chain self-signed.)
    with pytest.raises(RedisUnavailable, match=r"could not be verified \((self-signed|unable to get local issuer)"):
        asyncio.run(ping(url(one_way, ssl_ca_certs=pki[1].ca_file)))
    with pytest.raises(RedisUnavailable, match="its TLS certificate could not be verified"):
        asyncio.run(ping(url(one_way)))  # the system's CAs know nothing of this one


def test_without_the_client_certificate_a_redis_that_asks_for_one_is_unavailable(mutual, pki):
    # (Under TLS 1.3 the handshake is over before Redis checks the client: its refusal is an alert
    # that ends the connection under the first command.)
    with pytest.raises(RedisUnavailable, match="certificate required"):
        asyncio.run(ping(url(mutual, ssl_ca_certs=pki[0].ca_file)))


def test_redis_urls_never_fall_back_to_plaintext(one_way, pki):
    with pytest.raises(RedisUnavailable):
        asyncio.run(ping(url(one_way, "redis")))  # plaintext to a TLS port is no answer
    assert b"PONG" not in one_way.plaintext_answer()
    with pytest.raises(ConfigError, match="need rediss://"):
        Redis(url(one_way, "redis", ssl_ca_certs=pki[0].ca_file), connect_timeout=5, timeout=5)


@pytest.mark.parametrize("trusted", [True, False])
def test_the_gateways_limits_count_in_redis_over_tls_or_follow_the_policy(upstream, mutual, pki, client_cert, trusted,
                                                                          tmp_path):
    """An RPM limit of 2 counted in the TLS Redis (client certificate and all): 200, 200, 429. With
    the wrong CA, Redis is down for the gateway: the `closed` policy answers 503, never plaintext."""
    ca_file = pki[0].ca_file if trusted else pki[1].ca_file
    address = url(mutual, ssl_ca_certs=ca_file, ssl_certfile=client_cert.cert, ssl_keyfile=client_cert.key)
    clock = FileClock(str(tmp_path / "now"))
    with empty_database("sqlite") as database:
        provision(database)
        key, key_id, _ = new_key(database)
        run_cli(database, "limits", "set", "--key", key_id, "--rpm", "2")
        env = gateway_env(upstream.url, database, GATEWAY_REDIS_URL=address, GATEWAY_REDIS_PREFIX=redis_prefix(),
                          GATEWAY_LIMITS_ON_STORE_FAILURE="closed", GATEWAY_VALIDATE_RESPONSES="0", **clock.env)
        with GatewayProcess(env, module="tests.support.clocked_gateway") as gateway:
            statuses = [ask(gateway.url, key).status_code for _ in range(3)]
            log = gateway.log()
    if trusted:
        assert statuses == [200, 200, 429]
    else:
        assert statuses == [503, 503, 503]
        assert "its TLS certificate could not be verified" in log, log[-2000:]


def ask(url: str, key: str) -> httpx.Response:
    return httpx.post(f"{url}/v5/completions", headers={"x-api-key": key}, verify=SHARED_TLS, timeout=30,
                      json={"model": "fake/m", "prompt": "x", "max_tokens": 2})
