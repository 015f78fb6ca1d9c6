"""The Gemini protocol's adapter: one vendor of Google's Gemini API (generateContent), its options
(vendors/gemini/wire.py), and its translators: completions.py (a prompt as one user turn) and chat.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel

from gateway.core.config import Settings, VendorConfig
from gateway.core.endpoint import Endpoint
from gateway.core.errors import GatewayError
from gateway.core.parameters import Capabilities
from gateway.vendors.gemini.inference import GeminiInference
from gateway.vendors.gemini import wire
from gateway.vendors.gemini.chat import GeminiChat, chat_capabilities
from gateway.vendors.gemini.completions import GeminiCompletions, capabilities
from gateway.vendors.gemini.wire import GeminiOptions
from gateway.vendors.transport.http import HttpAdapter
from gateway.vendors.vendor_errors import error_message, vendor_error


class GeminiAdapter(HttpAdapter):
    protocol: ClassVar[str] = "gemini"
    default_base_url: ClassVar[str] = "https://generativelanguage.googleapis.com/v1beta"
    hosted_url: ClassVar[str] = default_base_url
    Options: ClassVar[type[BaseModel]] = GeminiOptions
    # Each endpoint's support records for given options.
    capabilities_of: ClassVar[Mapping[Endpoint, Callable[[Any], Capabilities]]] = {
        Endpoint.COMPLETIONS: capabilities, Endpoint.CHAT: chat_capabilities,
        Endpoint.RESPONSES: chat_capabilities}  # bridged to chat (endpoints/responses/request.py)

    def __init__(self, config: VendorConfig, options: GeminiOptions, settings: Settings) -> None:
        super().__init__(config, settings, wire.headers)
        self.capabilities = capabilities(options)
        self.chat_capabilities = chat_capabilities(options)
        self.translators = {Endpoint.COMPLETIONS: GeminiCompletions(self, self.capabilities),
                            Endpoint.CHAT: GeminiChat(self, self.chat_capabilities),
                            Endpoint.INFERENCE: GeminiInference(self)}
        self.translators[Endpoint.RESPONSES] = self.translators[Endpoint.CHAT]  # bridged to chat

    def _error(self, status: int, body: bytes, retry_after: str | None) -> GatewayError:
        # An invalid key is a 400 INVALID_ARGUMENT with reason API_KEY_INVALID: the gateway's
        # credentials, not the client's request, are at fault.
        if status == 400 and b"API_KEY_INVALID" in body:
            status = 401
        return vendor_error(self._config, status, error_message(body), retry_after)
