"""The `http` protocol's adapter: a self-hosted model server's own JSON API, which serves POST
/v5/inference only (the client's `args` is the server's body). Where it sends and what it reads
are the operator's options (options.py); the key goes in the configured header, nothing of the
client's does (wire.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel

from gateway.core.config import Settings, VendorConfig
from gateway.core.endpoint import Endpoint
from gateway.core.errors import ConfigError, GatewayError
from gateway.core.parameters import Capabilities
from gateway.vendors.http_server import wire
from gateway.vendors.http_server.inference import HttpServerInference
from gateway.vendors.http_server.options import HttpServerOptions
from gateway.vendors.transport.http import HttpAdapter
from gateway.vendors.vendor_errors import error_message, vendor_error


class HttpServerAdapter(HttpAdapter):
    protocol: ClassVar[str] = wire.PROTOCOL
    default_base_url: ClassVar[str] = wire.DEFAULT_BASE_URL
    hosted_url: ClassVar[str] = wire.HOSTED_URL
    Options: ClassVar[type[BaseModel]] = HttpServerOptions
    # It serves no endpoint with parameters of the gateway's: POST /v5/inference's are the server's.
    capabilities_of: ClassVar[Mapping[Endpoint, Callable[[Any], Capabilities]]] = {}

    def __init__(self, config: VendorConfig, options: HttpServerOptions, settings: Settings) -> None:
        wire.check_base_urls(config)
        if options.stream_format != "sse":
            # The transport reads server-sent events (vendors/transport/answers.py); a JSON-lines
            # stream would be refused as garbage on every request, so it is refused here instead.
            raise ConfigError(f"vendor {config.name!r} (protocol http): stream_format {options.stream_format!r} is "
                              "not served yet; only 'sse'")
        # The key's header alone: the content type is the transport's (vendors/transport/http1.py).
        framing = set(wire.headers(options, "", False))

        def headers(key: str) -> dict[str, str]:
            return {name: value for name, value in wire.headers(options, key, False).items() if name not in framing}

        super().__init__(config, settings, headers, paths=tuple(p for p in (options.path, options.stream_path) if p))
        self.options = options
        self.translators = {Endpoint.INFERENCE: HttpServerInference(self, options)}

    def _error(self, status: int, body: bytes, retry_after: str | None) -> GatewayError:
        return vendor_error(self._config, status, error_message(body), retry_after)
