"""gateway/vendors/transport/proxies.py: proxy URLs, NO_PROXY as curl reads it, which proxy a deployment
takes (its setting, its vendor's, the environment's), and the settings that reach it."""

from __future__ import annotations

import asyncio
import base64

import pytest

from gateway.core.config import ConfigError
from gateway.services import load_settings, redactor
from gateway.vendors import registry
from gateway.vendors.transport.proxies import Environment, NoProxy, Proxy, choose, open_tunnel, parse_proxy
from gateway.vendors.transport.client import TransportError


def test_a_proxy_url_gives_host_port_and_basic_credentials_that_its_repr_and_shown_keep_out():
    proxy = parse_proxy("http://al%40ice:s3cr%3At@proxy.corp:3128", "HTTPS_PROXY")
    assert (proxy.host, proxy.port) == ("proxy.corp", 3128)
    assert proxy.authorization == "Basic " + base64.b64encode(b"al@ice:s3cr:t").decode()
    assert proxy.shown == "http://proxy.corp:3128"
    assert "s3cr" not in repr(proxy) and "Basic" not in repr(proxy)


def test_a_proxy_without_scheme_or_port_is_http_on_curls_default_port():
    assert parse_proxy("proxy.corp", "x") == Proxy("proxy.corp", 1080)
    assert parse_proxy("http://[::1]:8080/", "x").shown == "http://[::1]:8080"


@pytest.mark.parametrize(("url", "message"), [
    ("socks5://user:hunter2@proxy:1080", "only http:// proxies"),
    ("https://proxy:443", "only http:// proxies"),
    ("http://user:hunter2@proxy:99999", "port"),
    ("http://proxy:3128/path", "nothing else"),
    ("http://", "nothing else"),
])
def test_unusable_proxies_are_config_errors_that_never_quote_the_password(url, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parse_proxy(url, "HTTPS_PROXY")
    assert "hunter2" not in str(caught.value) and "HTTPS_PROXY" in str(caught.value)


@pytest.mark.parametrize(("no_proxy", "host", "port", "bypassed"), [
    ("*", "api.openai.com", 443, True),
    ("example.com", "example.com", 443, True),
    ("example.com", "api.example.com", 443, True),
    (".example.com", "example.com", 443, True),
    (".example.com", "api.example.com", 443, True),
    ("*.example.com", "api.example.com", 443, True),
    ("example.com", "badexample.com", 443, False),
    ("example.com", "example.com.evil", 443, False),
    ("EXAMPLE.com", "Api.Example.COM.", 443, True),
    ("example.com:8443", "example.com", 8443, True),
    ("example.com:8443", "example.com", 443, False),
    ("localhost, 127.0.0.1 ,internal", "internal", 80, True),
    ("localhost 127.0.0.1", "127.0.0.1", 9000, True),
    ("127.0.0.1", "127.0.0.2", 9000, False),
    ("10.0.0.0/8", "10.20.30.40", 443, True),
    ("10.0.0.0/8", "11.0.0.1", 443, False),
    ("::1", "::1", 443, True),
    ("[::1]:8443", "::1", 8443, True),
    ("[::1]:8443", "::1", 443, False),
    ("fd00::/8", "fd12::1", 443, True),
    ("10.0.0.0/8", "ten.example", 443, False),
    ("", "example.com", 443, False),
    ("*.", "example.com", 443, False),
])
def test_no_proxy_matches_as_curl_does(no_proxy, host, port, bypassed):
    assert NoProxy(no_proxy).bypasses(host, port) is bypassed


PROXY = Proxy("proxy", 3128)
OTHER = Proxy("plain-proxy", 8080)


def test_the_environment_proxy_follows_the_scheme_and_no_proxy():
    env = Environment.read({"HTTPS_PROXY": "proxy:3128", "http_proxy": "plain-proxy:8080", "NO_PROXY": ".internal"})
    assert choose("https://api.openai.com/v1", None, "w", env) == PROXY
    assert choose("http://vllm:8000/v1", None, "w", env) == OTHER
    assert choose("https://llm.internal/v1", None, "w", env) is None


def test_lower_case_variables_win_and_all_proxy_is_the_fallback():
    env = Environment.read({"https_proxy": "proxy:3128", "HTTPS_PROXY": "plain-proxy:8080",
                            "ALL_PROXY": "plain-proxy:8080", "no_proxy": "", "NO_PROXY": "*"})
    assert env.https == PROXY and env.http == OTHER
    assert env.no_proxy.everything  # an empty no_proxy is as good as unset


def test_a_setting_wins_over_the_environment_and_none_or_empty_bypass_it():
    env = Environment.read({"HTTPS_PROXY": "plain-proxy:8080", "NO_PROXY": "*"})
    assert choose("https://api.openai.com", "http://proxy:3128", "w", env) == PROXY  # NO_PROXY is the environment's
    assert choose("https://api.openai.com", "none", "w", Environment.read({"HTTPS_PROXY": "p:1"})) is None
    assert choose("https://api.openai.com", "", "w", Environment.read({"HTTPS_PROXY": "p:1"})) is None
    assert choose("https://api.openai.com", None, "w", Environment()) is None


def test_an_unusable_environment_proxy_names_its_variable():
    with pytest.raises(ConfigError, match="https_proxy: only http:// proxies"):
        Environment.read({"https_proxy": "socks5h://proxy:1080"})


def settings(**env: str):
    return load_settings({"GATEWAY_VENDOR_LOCAL_ENABLED": "0", **env})


def test_vendor_and_deployment_settings_reach_the_config_and_the_deployment_wins(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text("""
[vendors.corp]
protocol = "openai"
proxy = "http://user:pr0xy-passw0rd@proxy:3128"
ca_file = "/etc/corp-ca.pem"
deployments = [
  { base_url = "https://a.example/v1", name = "a" },
  { base_url = "https://b.example/v1", name = "b", proxy = "none", ca_file = "" },
]
""")
    vendor = settings(GATEWAY_CONFIG=str(path)).vendors["corp"]
    a, b = vendor.targets
    assert vendor.proxy_of(a) == "http://user:pr0xy-passw0rd@proxy:3128" and vendor.ca_file_of(a) == "/etc/corp-ca.pem"
    assert vendor.proxy_of(b) == "none" and vendor.ca_file_of(b) == ""
    assert "pr0xy-passw0rd" not in repr(vendor)
    # What the gateway scrubs from every text it sends or logs.
    assert "pr0xy-passw0rd" not in redactor(settings(GATEWAY_CONFIG=str(path)))("proxy said pr0xy-passw0rd")


def test_proxy_and_ca_file_from_the_environment():
    vendor = settings(GATEWAY_VENDOR_X_PROTOCOL="openai", GATEWAY_VENDOR_X_BASE_URL="https://x.example/v1",
                      GATEWAY_VENDOR_X_PROXY="proxy:3128", GATEWAY_VENDOR_X_CA_FILE="/ca.pem").vendors["x"]
    assert vendor.proxy_of(vendor.targets[0]) == "proxy:3128" and vendor.ca_file_of(vendor.targets[0]) == "/ca.pem"
    assert "proxy" not in vendor.options


def test_a_bad_proxy_or_ca_file_fails_at_start_up_naming_the_vendor(tmp_path):
    bad_proxy = settings(GATEWAY_VENDOR_X_PROTOCOL="openai", GATEWAY_VENDOR_X_BASE_URL="https://x.example/v1",
                         GATEWAY_VENDOR_X_PROXY="socks5://u:hunter2@proxy:1080")
    with pytest.raises(ConfigError, match="vendor 'x' proxy: only http:// proxies") as caught:
        registry.Registry.from_settings(bad_proxy)
    assert "hunter2" not in str(caught.value)
    missing = settings(GATEWAY_VENDOR_X_PROTOCOL="openai", GATEWAY_VENDOR_X_BASE_URL="https://x.example/v1",
                       GATEWAY_VENDOR_X_CA_FILE=str(tmp_path / "absent.pem"))
    with pytest.raises(ConfigError, match="vendor 'x' ca_file .*absent.pem"):
        registry.Registry.from_settings(missing)


async def connect_through(answer: bytes | None) -> tuple[bytes, BaseException | None]:
    """A CONNECT to vendor.test:443 through a loopback "proxy" that reads the request head and
    writes `answer` (None: closes at once); what the proxy read, and how the tunnel failed."""
    heard = bytearray()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heard.extend(await reader.readuntil(b"\r\n\r\n"))
        if answer is not None:
            writer.write(answer)
            await writer.drain()
            await reader.read()  # until the client gives up on it
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    proxy = parse_proxy(f"http://user:pw@127.0.0.1:{server.sockets[0].getsockname()[1]}", "test")
    failure = None
    try:
        async with asyncio.timeout(10):
            transport = await open_tunnel(asyncio.get_running_loop(), proxy, "vendor.test", 443)
        transport.close()
    except Exception as exc:
        failure = exc
    finally:
        server.close()
    return bytes(heard), failure


def test_the_tunnel_asks_for_the_vendors_authority_with_the_proxys_credentials():
    heard, failure = asyncio.run(connect_through(b"HTTP/1.1 200 Connection established\r\n\r\n"))
    assert failure is None
    assert heard == (b"CONNECT vendor.test:443 HTTP/1.1\r\nhost: vendor.test:443\r\n"
                     b"proxy-authorization: Basic " + base64.b64encode(b"user:pw") + b"\r\n\r\n")


@pytest.mark.parametrize(("answer", "reason"), [
    (b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n",
     "the proxy refused the tunnel to the vendor (HTTP 407: its credentials are missing or wrong)"),
    (b"HTTP/1.0 403 Forbidden\r\n\r\n", "the proxy refused the tunnel to the vendor (HTTP 403: it does not allow"),
    (b"HTTP/1.1 502 Bad Gateway\r\n\r\nupstream down",
     "the proxy refused the tunnel to the vendor (HTTP 502: it could not reach the vendor)"),
    (b"HTTP/1.1 200 OK\r\n\r\n\x16\x03", "the proxy refused the tunnel to the vendor (HTTP 200; it sent bytes"),
    (b"SSH-2.0-OpenSSH\r\n\r\n", "the proxy answered CONNECT with something not HTTP"),
    (None, "the proxy closed the connection before answering CONNECT"),
])
def test_a_tunnel_refused_or_garbled_is_a_transport_error_naming_the_proxy(answer, reason):
    _, failure = asyncio.run(connect_through(answer))
    assert isinstance(failure, TransportError), failure
    assert failure.reason.startswith(reason) and "pw" not in str(failure)
