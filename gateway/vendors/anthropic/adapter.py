"""The Anthropic protocol's adapter: one vendor of Anthropic's Messages API (or a server speaking
it), its options, and its translators: completions.py (a text prompt as messages) and chat.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from gateway.core.config import Names, Settings, VendorConfig
from gateway.core.endpoint import Endpoint
from gateway.core.errors import GatewayError
from gateway.core.parameters import Capabilities
from gateway.vendors.anthropic import messages as wire
from gateway.vendors.anthropic.chat import CHAT, AnthropicChat
from gateway.vendors.anthropic.completions import AnthropicCompletions, capabilities
from gateway.vendors.anthropic.inference import AnthropicInference
from gateway.vendors.anthropic.messages import MESSAGES
from gateway.vendors.transport.http import HttpAdapter
from gateway.vendors.vendor_errors import error_message, vendor_error

# Models documented to reject an assistant prefill; `user_turn_models` replaces this list.
USER_TURN_MODELS = frozenset({"claude-opus-4-6*", "claude-sonnet-4-6*"})


class AnthropicOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_as: Literal["prefill", "user"] = "prefill"
    user_turn_models: Names = USER_TURN_MODELS  # glob patterns of models that get the prompt as a user turn


class AnthropicAdapter(HttpAdapter):
    protocol: ClassVar[str] = "anthropic"
    default_base_url: ClassVar[str] = "https://api.anthropic.com"
    hosted_url: ClassVar[str] = default_base_url
    Options: ClassVar[type[BaseModel]] = AnthropicOptions
    # Each endpoint's support records for given options.
    capabilities_of: ClassVar[Mapping[Endpoint, Callable[[Any], Capabilities]]] = {
        Endpoint.COMPLETIONS: capabilities, Endpoint.CHAT: lambda options: CHAT,
        Endpoint.RESPONSES: lambda options: CHAT}  # bridged to chat (endpoints/responses/request.py)

    def __init__(self, config: VendorConfig, options: AnthropicOptions, settings: Settings) -> None:
        super().__init__(config, settings, wire.headers, paths=(MESSAGES,))
        self.capabilities = capabilities(options)
        self.chat_capabilities = CHAT
        self.translators = {
            Endpoint.COMPLETIONS: AnthropicCompletions(self, self.capabilities, options.prompt_as,
                                                       options.user_turn_models),
            Endpoint.CHAT: AnthropicChat(self, CHAT),
            Endpoint.INFERENCE: AnthropicInference(self)}
        self.translators[Endpoint.RESPONSES] = self.translators[Endpoint.CHAT]  # bridged to chat

    def _error(self, status: int, body: bytes, retry_after: str | None) -> GatewayError:
        # 529 overloaded_error is a 5xx like any other: the vendor's fault, worth a retry.
        return vendor_error(self._config, status, error_message(body), retry_after)
