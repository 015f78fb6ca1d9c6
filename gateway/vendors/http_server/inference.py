"""POST /v5/inference on the `http` protocol: the client's `args` sent as it is to the operator's
`path` (a stream to `stream_path`, when the server has one) under the vendor's base URL; the
server's answer handed back unread (vendors/native.py)."""

from __future__ import annotations

from gateway.core.inference import InferenceCall
from gateway.vendors.http_server.options import HttpServerOptions
from gateway.vendors.native import NativeTranslator
from gateway.vendors.transport.http import HttpAdapter


class HttpServerInference(NativeTranslator):
    def __init__(self, adapter: HttpAdapter, options: HttpServerOptions) -> None:
        super().__init__(adapter)
        self._options = options

    def path(self, call: InferenceCall) -> str:
        return self._options.path

    def stream_path(self, call: InferenceCall) -> str:
        return self._options.stream_path or self._options.path
