"""How a deployment's connections reach it (`Network`): directly or through a proxy, and with which
TLS context; decided once per deployment as the gateway starts, never per request.

The proxy (`choose`) is the deployment's (or its vendor's) `proxy` setting, else the environment's
HTTPS_PROXY / HTTP_PROXY / ALL_PROXY unless NO_PROXY names the host, read the way curl reads them.

    https upstream   CONNECT host:port through the proxy, then TLS to the vendor inside the tunnel
                     (the certificate checked against the vendor's host name, not the proxy's)
    http upstream    requests in absolute form (`POST http://host/path`) sent to the proxy, the way
                     every proxy takes plain HTTP (many allow CONNECT to port 443 only)

Only http:// proxies are spoken (the kind corporate egress proxies are); credentials in the proxy's
URL (`http://user:password@proxy:3128`) become a `Proxy-Authorization: Basic` header, and are
kept out of every text: `Proxy.shown` is the URL without them.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import ipaddress
import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from gateway.core.errors import ConfigError
from gateway.vendors.transport.client import TransportError, connect_failure, described, tls

# What curl assumes when a proxy's URL names no port.
DEFAULT_PROXY_PORT = 1080
MAX_ANSWER_HEAD = 64 << 10  # a proxy's answer to CONNECT: its status line and headers
# A `proxy` setting that means "no proxy, whatever the environment says".
DIRECT = ("", "none")


@dataclass(frozen=True, slots=True)
class Proxy:
    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)  # the Proxy-Authorization value

    @property
    def shown(self) -> str:
        """The proxy as a log may name it: no credentials."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def parse_proxy(url: str, where: str) -> Proxy:
    """A proxy's URL, `[http://][user:password@]host[:port]`; anything else is a ConfigError naming
    `where` (the setting or variable) without quoting the URL, which may hold a password."""
    text = url.strip()
    parts = urlsplit(text if "://" in text else f"http://{text}")
    if parts.scheme.lower() != "http":
        raise ConfigError(f"{where}: only http:// proxies are supported (not {parts.scheme}://)")
    try:
        port = parts.port or DEFAULT_PROXY_PORT
    except ValueError:
        raise ConfigError(f"{where}: the proxy's port is not a number from 1 to 65535") from None
    if not parts.hostname or (parts.path not in ("", "/")) or parts.query or any(c.isspace() for c in text):
        raise ConfigError(f"{where}: a proxy is http://[user:password@]host[:port], nothing else")
    authorization = None
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(credentials.encode()).decode("ascii")
    return Proxy(parts.hostname, port, authorization)


class NoProxy:
    """NO_PROXY as curl reads it: names separated by commas (or spaces); `*` alone bypasses every
    host; a name matches itself and every host under it (`example.com` and `.example.com` both
    match `api.example.com` and `example.com`); an IP address matches itself, a CIDR block every
    address in it; `name:port` (`[v6]:port`) matches that port only. Case does not matter."""

    def __init__(self, value: str) -> None:
        self.everything = False
        self._names: list[tuple[str, int | None]] = []
        self._networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, int | None]] = []
        for entry in value.replace(",", " ").split():
            if entry == "*":
                self.everything = True
                continue
            host, port = _host_port(entry.lower())
            try:
                self._networks.append((ipaddress.ip_network(host, strict=False), port))
            except ValueError:
                if host := host.strip(".").lstrip("*."):  # ".example.com", "*.example.com": the domain
                    self._names.append((host, port))

    def bypasses(self, host: str, port: int) -> bool:
        if self.everything:
            return True
        host = host.lower().rstrip(".")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            address = None
        if address is not None:
            return any(address in network and wanted in (None, port) for network, wanted in self._networks)
        return any((host == name or host.endswith("." + name)) and wanted in (None, port)
                   for name, wanted in self._names)


def _host_port(entry: str) -> tuple[str, int | None]:
    """"host", "host:port", "[v6]", "[v6]:port", a bare v6 address or a CIDR block."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        if port.isdigit():
            return host, int(port)
    return entry, None


@dataclass(frozen=True, slots=True)
class Environment:
    """The proxy variables of a process (`environment()`), lower-case first as curl reads them."""

    https: Proxy | None = None
    http: Proxy | None = None
    no_proxy: NoProxy = field(default_factory=lambda: NoProxy(""))

    @classmethod
    def read(cls, env: Mapping[str, str]) -> Environment:
        def proxy(*names: str) -> Proxy | None:
            for name in names:
                if value := env.get(name, "").strip():
                    return parse_proxy(value, name)
            return None

        every = ("all_proxy", "ALL_PROXY")
        return cls(https=proxy("https_proxy", "HTTPS_PROXY", *every), http=proxy("http_proxy", "HTTP_PROXY", *every),
                   no_proxy=NoProxy(env.get("no_proxy") or env.get("NO_PROXY") or ""))


@functools.cache
def environment() -> Environment:
    """This process's proxy variables, read once."""
    return Environment.read(os.environ)


def choose(base_url: str, setting: str | None, where: str, env: Environment | None = None) -> Proxy | None:
    """The proxy a deployment at `base_url` goes through: its `setting` when it has one ("" or
    "none": no proxy; an explicit proxy is used whatever NO_PROXY says), else the environment's
    for the URL's scheme unless NO_PROXY names its host."""
    if setting is not None:
        return None if setting.strip().lower() in DIRECT else parse_proxy(setting, where)
    env = env or environment()
    parts = urlsplit(base_url)
    proxy = env.https if parts.scheme == "https" else env.http
    if proxy is None or not parts.hostname:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return None if env.no_proxy.bypasses(parts.hostname, port) else proxy


@dataclass(frozen=True, slots=True)
class Network:
    """How a deployment's connections reach it: through `proxy` or directly, and, over https, with
    which TLS context (transport.tls()). Decided once per deployment, as the gateway starts."""

    proxy: Proxy | None = None
    context: ssl.SSLContext | None = None  # None: tls(), the process's default

    @property
    def tls(self) -> ssl.SSLContext:
        return self.context or tls()


def network(base_url: str, proxy: str | None, ca_file: str, where: str) -> Network:
    """The Network of a deployment at `base_url` with its `proxy` and `ca_file` settings (a
    ConfigError naming `where` when either cannot be used)."""
    try:
        context = tls(ca_file) if ca_file else None
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{where} ca_file {ca_file!r}: not a readable PEM file of CA certificates "
                          f"({described(exc)})") from None
    return Network(choose(base_url, proxy, f"{where} proxy"), context)


async def reach(loop: asyncio.AbstractEventLoop, protocol: Callable[[], asyncio.Protocol],
                proxy: Proxy) -> asyncio.BaseTransport:
    """A connection to the proxy itself; failing, a TransportError that says it was the proxy."""
    try:
        transport, _ = await loop.create_connection(protocol, proxy.host, proxy.port)
    except OSError as exc:
        if isinstance(exc, TimeoutError):
            raise
        raise TransportError(f"the proxy: {connect_failure(exc)}",
                             where=f"proxy {proxy.shown} ({described(exc)})") from None
    return transport


async def open_tunnel(loop: asyncio.AbstractEventLoop, proxy: Proxy, host: str, port: int) -> asyncio.Transport:
    """A connection through `proxy` to host:port (HTTP CONNECT, RFC 9110 9.3.6), once the proxy said
    2xx; a refusal (407: credentials, 403: not allowed, 502: the vendor unreachable from it) is a
    TransportError naming the proxy and its status, never its credentials."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    asked = _Tunnel()
    transport = await reach(loop, lambda: asked, proxy)
    auth = f"proxy-authorization: {proxy.authorization}\r\n" if proxy.authorization else ""
    transport.write(f"CONNECT {authority} HTTP/1.1\r\nhost: {authority}\r\n{auth}\r\n".encode("latin-1"))
    try:
        status, line = await asked.answered
    except BaseException:
        transport.close()
        raise
    if not 200 <= status < 300 or asked.extra:
        transport.close()
        why = _REFUSALS.get(status, "") if status >= 300 else "; it sent bytes before the vendor's"
        raise TransportError(f"the proxy refused the tunnel to the vendor (HTTP {status}{why})",
                             where=f"proxy {proxy.shown} to {authority}: {line!r}")
    return transport  # type: ignore[return-value]


# (tinyproxy answers a wrong password with 401, not 407: on a tunnel's CONNECT either is the proxy's.)
_REFUSALS = {407: ": its credentials are missing or wrong", 401: ": its credentials are missing or wrong", 403: ": it does not allow this destination",
             502: ": it could not reach the vendor", 503: ": it could not reach the vendor"}


class _Tunnel(asyncio.Protocol):
    """The proxy's answer to CONNECT: its status line and headers (a refusal's body is not read)."""

    def __init__(self) -> None:
        self.answered: asyncio.Future[tuple[int, str]] = asyncio.get_running_loop().create_future()
        self._head = bytearray()
        self.extra = False  # bytes after the head, before TLS began: not the vendor's

    def data_received(self, data: bytes) -> None:
        if self.answered.done():
            self.extra = True
            return
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end >= 0:
            self.extra = len(self._head) > end + 4
            line = self._head[: self._head.find(b"\r\n")].decode("latin-1")
            parts = line.split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                self.answered.set_exception(TransportError("the proxy answered CONNECT with something not HTTP",
                                                           where=f"{line[:80]!r}"))
            else:
                self.answered.set_result((int(parts[1]), line[:200]))
        elif len(self._head) > MAX_ANSWER_HEAD:
            self.answered.set_exception(TransportError(f"the proxy's answer head is over {MAX_ANSWER_HEAD} bytes"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answered.done():
            self.answered.set_exception(TransportError("the proxy closed the connection before answering CONNECT"))
