"""TLS to vendors with a private CA: the real gateway in front of https fakes whose certificates a
test CA (trustme) signed. A vendor's `ca_file` and the process's SSL_CERT_FILE are trusted; the
system's roots, another CA or a certificate for another name are a 502 that says it was the
certificate, and a log line saying why, never a connection made anyway."""

from __future__ import annotations

import certifi
import httpx
import pytest

from tests.support.cli import fresh_account
from tests.support.environments import SHARED_TLS
from tests.support.fakes.openai_upstream import FakeOpenAI
from tests.support.fakes.server import ServerThread
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import create_key
from tests.support.tls import TestCA


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    return TestCA(directory, "corp"), TestCA(directory, "other")


@pytest.fixture(scope="module")
def upstreams(pki):
    """The fake vendor twice over https: with a certificate for loopback, and for another name."""
    corp, _ = pki
    fakes = {}
    servers = []
    for label, names in (("vendor", ()), ("elsewhere", ("vendor.elsewhere.test",))):
        issued = corp.issue(label, *names)
        fake = FakeOpenAI()
        server = ServerThread(fake, ssl_certfile=str(issued.cert), ssl_keyfile=str(issued.key)).__enter__()
        servers.append(server)
        fakes[label] = server.url
    yield fakes
    for server in servers:
        server.__exit__()


def vendor(name: str, url: str, ca_file: str | None = None) -> str:
    lines = [f"[vendors.{name}]", 'protocol = "openai"', f'base_url = "{url}/v1"', 'api_key_env = "VENDOR_KEY"',
             'server = "openai"', "retries = 0"] + ([f'ca_file = "{ca_file}"'] if ca_file is not None else [])
    return "\n".join(lines) + "\n\n"


@pytest.fixture(scope="module")
def gateway(pki, upstreams, database, tmp_path_factory):
    """SSL_CERT_FILE is the corp CA: `default` trusts it; `own` names it in ca_file; `public`
    trusts only the public roots (certifi's), `other` another test CA; `renamed` is served a
    certificate for another host name."""
    corp, other = pki
    url = upstreams["vendor"]
    toml = (vendor("default", url) + vendor("own", url, str(corp.ca_file)) + vendor("public", url, certifi.where())
            + vendor("other", url, str(other.ca_file)) + vendor("renamed", upstreams["elsewhere"], str(corp.ca_file)))
    path = tmp_path_factory.mktemp("gateway") / "gateway.toml"
    path.write_text(toml)
    env = {"GATEWAY_CONFIG": str(path), "GATEWAY_DATABASE_URL": database.url, "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
           "VENDOR_KEY": "sk-vendor-key-never-shown", "SSL_CERT_FILE": str(corp.ca_file)}
    with GatewayProcess(env) as running:
        yield running


@pytest.fixture(scope="module")
def key(database):
    return create_key(database.url, fresh_account())


def ask(gateway: GatewayProcess, key: str, model: str) -> httpx.Response:
    return httpx.post(f"{gateway.url}/v5/completions", headers={"x-api-key": key}, verify=SHARED_TLS, timeout=30,
                      json={"model": model, "prompt": "hello", "max_tokens": 2})


@pytest.mark.parametrize("model", ["default/m", "own/m"])
def test_a_vendor_whose_certificate_the_private_ca_signed_is_served(gateway, key, model):
    r = ask(gateway, key, model)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == " w0 w1"


@pytest.mark.parametrize(("vendor_name", "why"), [
    ("public", "unable to get local issuer certificate"),
    ("other", "unable to get local issuer certificate"),
    ("renamed", "mismatch, certificate is not valid for"),
])
def test_a_certificate_not_trusted_is_a_502_saying_so_and_a_log_line_saying_why(gateway, key, vendor_name, why):
    r = ask(gateway, key, f"{vendor_name}/m")
    assert r.status_code == 502, r.text
    message = r.json()["error"]["message"]
    assert f"cannot talk to vendor '{vendor_name}': its TLS certificate could not be verified" in message, message
    assert why in message
    lines = [line for line in gateway.log().splitlines() if f"vendor {vendor_name}," in line]
    assert any("certificate verify failed" in line and why in line for line in lines), lines
