"""What an `http` vendor's requests are on the wire, and the pieces of its answers the gateway reads.

Pure functions of the vendor's options (options.py): the URL and headers of a request, a count at a
pointer, a stream framed as JSON lines. The body is the client's `args`, prepared by the inference
endpoint's rules (gateway/endpoints/inference/); nothing here sends anything.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from gateway.core.errors import ConfigError
from gateway.core.vendor_config import VendorConfig
from gateway.vendors import untrusted as read
from gateway.vendors.http_server.options import HttpServerOptions
from gateway.vendors.http_server.pointer import ABSENT, resolve, tokens
from gateway.vendors.transport.sse_reader import MAX_EVENT_BYTES, MalformedStream

PROTOCOL = "http"
# A server the operator names: there is no hosted service and no default address.
DEFAULT_BASE_URL = ""
HOSTED_URL = ""
ACCEPT = {"sse": "text/event-stream", "json_lines": "application/x-ndjson"}


def check_base_urls(vendor: VendorConfig) -> None:
    """Every deployment of an http vendor names its server (there is no default), as a base the
    path is appended to: no query or fragment, which the path would land in. For the adapter to
    call as it is built; a ConfigError stops the gateway at start-up."""
    for index, target in enumerate(vendor.targets):
        where = f"vendor {vendor.name!r}" + (f" deployment {index}" if vendor.deployments else "")
        if not target.base_url:
            raise ConfigError(f"{where} (protocol http) needs a base_url: the server's address")
        parts = urlsplit(target.base_url)
        if parts.query or parts.fragment or target.base_url.endswith(("?", "#")):
            raise ConfigError(f"{where}: a base_url with a query or fragment cannot take a path after it")


def url(base_url: str, options: HttpServerOptions, stream: bool) -> str:
    """Where a request goes: the deployment's base URL and the configured path (the stream path for
    a stream, when the server has one). Both were checked as the configuration loaded."""
    path = options.stream_path if stream and options.stream_path is not None else options.path
    return base_url.rstrip("/") + path


def headers(options: HttpServerOptions, key: str, stream: bool) -> dict[str, str]:
    """The request's headers: JSON in, the answer's media type, and the gateway's key in the
    configured header (none for a server without a key). Nothing of the client's."""
    sent = {"content-type": "application/json",
            "accept": ACCEPT[options.stream_format] if stream else "application/json"}
    if key:
        sent[options.key_header] = f"{options.key_scheme} {key}" if options.key_scheme else key
    return sent


def count_at(pointer: str | None, document: Any) -> int | None:
    """The token count `pointer` names in a vendor's answer: None when the server did not report it
    (no pointer configured, nothing there, or null); untrusted.Malformed when what is there is not a
    count from 0 to MAX_USAGE_TOKENS."""
    if pointer is None:
        return None
    value = resolve(pointer, document)
    if value is ABSENT or value is None:
        return None
    return read.count(value, "the count at " + _where(pointer))


def flag_at(pointer: str | None, document: Any) -> bool:
    """Whether the member `pointer` names is there and neither null nor false (a stream's end mark)."""
    if pointer is None:
        return False
    value = resolve(pointer, document)
    return value is not ABSENT and value is not None and value is not False


def error_at(pointer: str, document: Any) -> str | None:
    """The server's error message where it reports one (`{"error": "..."}` or `{"error":
    {"message": "..."}}`), or None when the document reports no error. Not clipped nor redacted."""
    value = resolve(pointer, document)
    if value is ABSENT or value is None or value is False:
        return None
    if isinstance(value, dict):
        value = value.get("message", "")
    return value if isinstance(value, str) and value else "the server reported an error"


def _where(pointer: str) -> str:
    # The operator's pointer, never the vendor's data: safe in a message.
    return "/".join(("", *tokens(pointer))) or "the answer"


class JsonLines:
    """A stream framed as one JSON document per line (Ollama, TGI-like servers with
    `stream_format = "json_lines"`): the complete lines of what arrived, bounded like SSE events."""

    def __init__(self, limit: int = MAX_EVENT_BYTES) -> None:
        self._rest = b""
        self._limit = limit

    def feed(self, piece: bytes) -> list[str]:
        lines = (self._rest + piece).split(b"\n")
        self._rest = lines.pop()
        if len(self._rest) > self._limit:
            raise MalformedStream(f"a line is longer than {self._limit} bytes")
        out = []
        for line in lines:
            if len(line) > self._limit:
                raise MalformedStream(f"a line is longer than {self._limit} bytes")
            if line.strip():
                out.append(_text(line.rstrip(b"\r")))
        return out

    def close(self) -> list[str]:
        """The last line when the body ended without a newline."""
        rest, self._rest = self._rest, b""
        return [_text(rest)] if rest.strip() else []


def _text(line: bytes) -> str:
    try:
        return line.decode()
    except UnicodeDecodeError as exc:
        raise MalformedStream(f"stream is not UTF-8: {exc.reason} at byte {exc.start}") from None
