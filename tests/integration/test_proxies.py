"""The gateway's vendor client behind a real egress proxy (Debian's tinyproxy, started here): a
CONNECT tunnel to an https vendor whose certificate a test CA signed (the host name checked
against the vendor, not the proxy), absolute-form requests to an http one, the proxy's credentials
from its URL, its refusals as errors that name the proxy and never the credentials, and kept-alive
tunnels used again. Then the real gateway configured as an operator would: HTTPS_PROXY and
NO_PROXY from the environment, and a vendor's own `proxy` setting winning over them."""

from __future__ import annotations

import asyncio
import json

import certifi
import httpx
import pytest

from gateway.core.vendor_config import Timeouts
from gateway.vendors.transport.proxies import Network, parse_proxy
from gateway.vendors.transport.client import TransportError, read_body, tls
from gateway.vendors.transport.http1 import Http1Client
from tests.support.cli import fresh_account
from tests.support.environments import LOCAL_MODEL, LOCAL_TIMEOUT, SHARED_TLS, local_env
from tests.support.fakes.openai_upstream import FakeOpenAI
from tests.support.fakes.server import ServerThread
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import create_key
from tests.support.tinyproxy import Tinyproxy, tinyproxy_missing
from tests.support.tls import TestCA

needs_tinyproxy = pytest.mark.skipif(tinyproxy_missing() is not None, reason=tinyproxy_missing() or "")

CREDENTIALS = "gateway:pr0xy-s3cret"
BODY = json.dumps({"model": "m", "prompt": "hello", "max_tokens": 2}).encode()


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return TestCA(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def upstream(ca):
    """The fake OpenAI vendor over https, its certificate for 127.0.0.1 and localhost from `ca`."""
    issued = ca.issue("vendor")
    fake = FakeOpenAI()
    with ServerThread(fake, ssl_certfile=str(issued.cert), ssl_keyfile=str(issued.key)) as server:
        fake.url, fake.port = server.url, server.port
        yield fake


@pytest.fixture(scope="module")
def plain_upstream():
    fake = FakeOpenAI()
    with ServerThread(fake) as server:
        fake.url, fake.port = server.url, server.port
        yield fake


@pytest.fixture(scope="module")
def proxy(upstream, tmp_path_factory):
    if reason := tinyproxy_missing():
        pytest.skip(reason)
    with Tinyproxy(tmp_path_factory.mktemp("proxy"), (upstream.port,)) as running:
        yield running


@pytest.fixture(scope="module")
def guarded_proxy(upstream, tmp_path_factory):
    """A proxy that wants CREDENTIALS."""
    if reason := tinyproxy_missing():
        pytest.skip(reason)
    with Tinyproxy(tmp_path_factory.mktemp("guarded"), (upstream.port,), CREDENTIALS) as running:
        yield running


def client(ca, proxy_url: str) -> Http1Client:
    network = Network(parse_proxy(proxy_url, "test"), tls(str(ca.ca_file)))
    return Http1Client({"authorization": "Bearer sk-vendor-key"}, Timeouts(connect=10, first_byte=10), network)


async def completions(http: Http1Client, url: str, times: int = 1) -> list[tuple[int, dict]]:
    answers = []
    try:
        for _ in range(times):
            answer = await http.send(f"{url}/v1/completions", BODY)
            try:
                answers.append((answer.status, json.loads(await read_body(answer, 1 << 20))))
            finally:
                await answer.aclose()
    finally:
        await http.aclose()
    return answers


def connects_to(proxy: Tinyproxy, port: int) -> int:
    return sum(line.startswith(f"CONNECT 127.0.0.1:{port} ") for line in proxy.requests())


def test_an_https_vendor_is_reached_through_one_kept_alive_tunnel(ca, upstream, proxy):
    before, served = connects_to(proxy, upstream.port), len(upstream.requests)
    answers = asyncio.run(completions(client(ca, proxy.url()), upstream.url, times=3))
    assert [status for status, _ in answers] == [200, 200, 200]
    assert answers[0][1]["choices"][0]["text"] == " w0 w1"
    assert len(upstream.requests) - served == 3
    # One tunnel for the three (the pool kept it), and TLS inside it checked the vendor's name.
    assert connects_to(proxy, upstream.port) - before == 1


def test_the_proxys_credentials_come_from_its_url_and_stay_out_of_the_vendors_request(ca, upstream, guarded_proxy):
    served = len(upstream.requests)
    answers = asyncio.run(completions(client(ca, guarded_proxy.url(CREDENTIALS)), upstream.url))
    assert answers[0][0] == 200
    headers = upstream.requests[served]["headers"]
    assert "proxy-authorization" not in headers and headers["authorization"] == "Bearer sk-vendor-key"


@pytest.mark.parametrize("credentials", [None, "gateway:wrong-password"])
def test_a_proxy_refusing_the_tunnel_is_an_error_naming_the_proxy_not_its_credentials(ca, upstream, guarded_proxy,
                                                                                      credentials):
    with pytest.raises(TransportError) as caught:
        asyncio.run(completions(client(ca, guarded_proxy.url(credentials)), upstream.url))
    assert caught.value.reason.startswith("the proxy refused the tunnel to the vendor (HTTP 40")  # tinyproxy: 407, 401
    assert "credentials are missing or wrong" in caught.value.reason
    assert str(guarded_proxy.port) in str(caught.value)  # the log's side says which proxy
    assert "wrong-password" not in str(caught.value) and "pr0xy-s3cret" not in str(caught.value)


@needs_tinyproxy
def test_a_proxy_forbidding_the_destination_is_a_403_refusal(ca, upstream, tmp_path):
    with Tinyproxy(tmp_path, connect_ports=(443,)) as strict, pytest.raises(TransportError) as caught:
        asyncio.run(completions(client(ca, strict.url()), upstream.url))
    assert "the proxy refused the tunnel" in caught.value.reason and "403" in caught.value.reason


def test_an_unreachable_proxy_is_named_as_the_proxy(ca, upstream):
    with pytest.raises(TransportError) as caught:
        asyncio.run(completions(client(ca, "http://127.0.0.1:9"), upstream.url))
    assert caught.value.reason == "the proxy: connection refused"


def test_an_http_vendor_gets_absolute_form_requests_through_the_proxy(ca, plain_upstream, proxy, guarded_proxy):
    # (One request per client: tinyproxy closes a plain-HTTP connection at the next request, without
    # saying so; the gateway's vendor layer sends a request dropped that way once more.)
    served = len(plain_upstream.requests)
    assert asyncio.run(completions(client(ca, proxy.url()), plain_upstream.url))[0][0] == 200
    assert proxy.requests()[-1] == f"POST {plain_upstream.url}/v1/completions HTTP/1.1"
    assert asyncio.run(completions(client(ca, guarded_proxy.url(CREDENTIALS)), plain_upstream.url))[0][0] == 200
    assert "proxy-authorization" not in plain_upstream.requests[-1]["headers"]  # the proxy took it
    assert len(plain_upstream.requests) - served == 2
    with pytest.raises(TransportError, match="the proxy refused the request .*407"):
        asyncio.run(completions(client(ca, guarded_proxy.url()), plain_upstream.url))


def vendor(name: str, url: str, ca_file: str, **extra: str) -> str:
    lines = [f"[vendors.{name}]", 'protocol = "openai"', f'base_url = "{url}/v1"', 'api_key_env = "VENDOR_KEY"',
             f'ca_file = "{ca_file}"', 'server = "openai"', "retries = 0", "first_byte = 10",
             *(f'{k} = "{v}"' for k, v in extra.items())]
    return "\n".join(lines) + "\n\n"


@pytest.fixture(scope="module")
def gateway(ca, upstream, plain_upstream, proxy, guarded_proxy, database, tmp_path_factory):
    """HTTPS_PROXY is the guarded proxy (with its credentials), NO_PROXY names localhost: `corp`
    goes through it, `nearby` (the same vendor as localhost) around it, `own` through the other
    proxy (its setting), `direct` around both (proxy = "none") and `refused` to the guarded proxy
    without credentials; `plain` is an http vendor behind the other proxy."""
    by_ip, by_name = upstream.url, upstream.url.replace("127.0.0.1", "localhost")
    ca_file = str(ca.ca_file)
    toml = (vendor("corp", by_ip, ca_file) + vendor("nearby", by_name, ca_file)
            + vendor("own", by_ip, ca_file, proxy=proxy.url()) + vendor("direct", by_ip, ca_file, proxy="none")
            + vendor("refused", by_ip, ca_file, proxy=guarded_proxy.url())
            + vendor("plain", plain_upstream.url, ca_file, proxy=proxy.url()))
    path = tmp_path_factory.mktemp("gateway") / "gateway.toml"
    path.write_text(toml)
    env = {"GATEWAY_CONFIG": str(path), "GATEWAY_DATABASE_URL": database.url, "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
           "VENDOR_KEY": "sk-vendor-key-never-shown", "HTTPS_PROXY": guarded_proxy.url(CREDENTIALS),
           "NO_PROXY": "localhost,example.internal"}
    with GatewayProcess(env) as running:
        yield running


def ask(gateway: GatewayProcess, key: str, model: str) -> httpx.Response:
    return httpx.post(f"{gateway.url}/v5/completions", headers={"x-api-key": key}, verify=SHARED_TLS, timeout=30,
                      json={"model": model, "prompt": "hello", "max_tokens": 2})


def test_the_gateway_honours_https_proxy_no_proxy_and_each_vendors_proxy(gateway, database, upstream, proxy,
                                                                          guarded_proxy):
    key = create_key(database.url, fresh_account())
    through = connects_to(proxy, upstream.port), connects_to(guarded_proxy, upstream.port)
    for model, own, environment in (("corp", 0, 1), ("nearby", 0, 0), ("own", 1, 0), ("direct", 0, 0)):
        r = ask(gateway, key, f"{model}/m")
        assert r.status_code == 200, (model, r.text)
        assert r.json()["choices"][0]["text"] == " w0 w1"
        now = connects_to(proxy, upstream.port), connects_to(guarded_proxy, upstream.port)
        assert (now[0] - through[0], now[1] - through[1]) == (own, environment), model
        through = now


def test_an_http_vendor_behind_a_proxy_serves_every_request(gateway, database, plain_upstream, proxy):
    """(tinyproxy drops a kept-alive plain-HTTP connection at its next request: the gateway sends
    that request once more, on a new connection, and the client sees nothing of it.)"""
    key = create_key(database.url, fresh_account())
    line = f"POST {plain_upstream.url}/v1/completions HTTP/1.1"
    before, served = proxy.requests().count(line), len(plain_upstream.requests)
    assert [ask(gateway, key, "plain/m").status_code for _ in range(3)] == [200, 200, 200]
    assert len(plain_upstream.requests) - served == 3
    assert proxy.requests().count(line) - before == 3


def test_a_refusing_proxy_is_a_502_naming_the_proxy_and_a_log_line_without_credentials(gateway, database):
    r = ask(gateway, create_key(database.url, fresh_account()), "refused/m")
    assert r.status_code == 502, r.text
    message = r.json()["error"]["message"]
    assert "proxy" in message and "407" in message, message
    assert "pr0xy-s3cret" not in r.text and "gateway:" not in message
    log = gateway.log()
    assert any("proxy" in line and "407" in line and "vendor refused" in line for line in log.splitlines()), log[-2000:]
    assert "pr0xy-s3cret" not in log and "sk-vendor-key-never-shown" not in log


def test_inside_the_tunnel_the_vendors_certificate_is_checked_against_the_vendors_ca(upstream, proxy):
    http = Http1Client({}, Timeouts(connect=10), Network(parse_proxy(proxy.url(), "test"), tls(certifi.where())))
    with pytest.raises(TransportError) as caught:
        asyncio.run(completions(http, upstream.url))
    assert caught.value.reason.startswith("its TLS certificate could not be verified (unable to get local issuer")
    assert f"through proxy {proxy.url()}" in str(caught.value)


def test_the_proxy_variables_never_reach_the_embedded_models_loopback_engine(database):
    """The local vendor's engine listens on loopback; with every proxy variable naming a port that
    refuses and no NO_PROXY, the model still loads and answers."""
    unreachable = "http://127.0.0.1:9"
    env = {**local_env(database.url), "HTTP_PROXY": unreachable, "HTTPS_PROXY": unreachable,
           "ALL_PROXY": unreachable, "http_proxy": unreachable, "NO_PROXY": "", "no_proxy": ""}
    with GatewayProcess(env, ready_timeout=LOCAL_TIMEOUT) as gateway:
        r = httpx.post(f"{gateway.url}/v5/completions", headers={"x-api-key": database.key}, verify=SHARED_TLS,
                       timeout=LOCAL_TIMEOUT, json={"model": LOCAL_MODEL, "prompt": "Hello", "max_tokens": 1})
    assert r.status_code == 200, r.text
