"""The OpenAI protocol's adapter: one vendor of OpenAI itself or of any OpenAI-compatible server
(vLLM, llama.cpp's server, Ollama, Together, Fireworks...), configured with a base URL. It finds
out which server it fronts as it starts (vendors/openai/servers.py) and serves each endpoint by
its translator (completions.py, chat.py, responses.py, inference.py), with what the server lacks
emulated or refused; a Responses request goes to the server's own Responses API where it has one
(OpenAI's), else through its chat.

    server = "auto"               # or openai, llama.cpp, vllm, sglang, ollama, unidentified
    lacks = ["echo", "best_of"]   # any request parameter, or "prompt" for list prompts
    max_stop = 1                  # stop sequences it takes per request; more are matched by the gateway
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel

from gateway.core.config import Settings, VendorConfig
from gateway.core.endpoint import Endpoint
from gateway.core.errors import GatewayError
from gateway.core.parameters import Capabilities
from gateway.vendors.openai import servers
from gateway.vendors.openai.chat import CHAT_COMPLETIONS, OpenAIChat, chat_capabilities
from gateway.vendors.openai.completions import COMPLETIONS, OpenAICompletions, capabilities
from gateway.vendors.openai.inference import OpenAIInference
from gateway.vendors.openai.responses import RESPONSES, OpenAIResponses
from gateway.vendors.openai.servers import OpenAIOptions, Server
from gateway.vendors.transport.http import HttpAdapter
from gateway.vendors.vendor_errors import error_message, vendor_error

log = logging.getLogger("gateway.vendors")

MODELS = "/models"  # what the server is identified by
# Seconds the server's identification may take as the gateway starts; an unanswered one is asked
# again in the background, RETRY_IDENTIFY seconds later at first, doubling to a minute.
IDENTIFY_TIMEOUT = 5.0
RETRY_IDENTIFY = 5.0


class OpenAIAdapter(HttpAdapter):
    protocol: ClassVar[str] = "openai"
    # Any compatible server: one without a base_url is a mistake, not OpenAI.
    default_base_url: ClassVar[str] = ""
    hosted_url: ClassVar[str] = "https://api.openai.com/v1"
    Options: ClassVar[type[BaseModel]] = OpenAIOptions
    # Each endpoint's support records for given options (the server they name, else unidentified).
    capabilities_of: ClassVar[Mapping[Endpoint, Callable[[Any], Capabilities]]] = {
        Endpoint.COMPLETIONS: capabilities,
        Endpoint.CHAT: lambda options: chat_capabilities(servers.declared(options.server, ()) or servers.UNIDENTIFIED,
                                                         options.lacks),
    }
    # A Responses request bridged to chat (endpoints/responses/) has chat's record; where the server
    # has the Responses API, its translator says each field (`responses_fields`).
    capabilities_of = {**capabilities_of, Endpoint.RESPONSES: capabilities_of[Endpoint.CHAT]}

    def __init__(self, config: VendorConfig, options: OpenAIOptions, settings: Settings) -> None:
        super().__init__(config, settings, _headers, paths=(COMPLETIONS, CHAT_COMPLETIONS, RESPONSES))
        self._options = options
        self._declared = servers.declared(options.server, (target.base_url for target in config.targets))
        self._identifying: asyncio.Task[None] | None = None
        self._completions = OpenAICompletions(self)
        self._chat = OpenAIChat(self)
        self._responses = OpenAIResponses(self)
        self.translators = {Endpoint.COMPLETIONS: self._completions, Endpoint.CHAT: self._chat,
                            Endpoint.INFERENCE: OpenAIInference(self, options.inference_path)}
        self._use(self._declared or servers.UNIDENTIFIED)

    def _use(self, server: Server) -> None:
        """Serve as `server` does: each translator's capabilities, which the planner reads, and
        what it puts on the wire."""
        self.server = server
        self._completions.use(capabilities(self._options, server), server)
        self._chat.use(chat_capabilities(server, self._options.lacks), server)
        # Its own Responses API, or bridged through its chat (endpoints/responses/request.py).
        self.translators[Endpoint.RESPONSES] = self._responses if server.responses_api else self._chat

    @property
    def capabilities(self) -> Capabilities:
        """The completions translator's, as the server it fronts is known now."""
        return self._completions.capabilities

    @property
    def chat_capabilities(self) -> Capabilities:
        return self._chat.capabilities

    async def start(self) -> None:
        """Identify the server unless the configuration names it. One that cannot be asked now is
        asked again in the background; meanwhile it is served as UNIDENTIFIED."""
        if self._declared is None and not await self._identify():
            self._identifying = asyncio.create_task(self._identify_later())

    async def close(self) -> None:
        if self._identifying is not None:
            self._identifying.cancel()
        await super().close()

    async def identified(self) -> Server:
        """The server, once identified (awaits the background identification, if one runs)."""
        if self._identifying is not None:
            await asyncio.shield(self._identifying)
        return self.server

    async def _identify(self) -> bool:
        """Ask every deployment which server it is; True once they all answered."""
        try:
            async with asyncio.timeout(IDENTIFY_TIMEOUT):
                answers = await self._deployments.probe(MODELS)
        except TimeoutError:
            answers = [None]
        if any(answer is None for answer in answers):
            log.info("vendor %s: could not ask its server which it is yet; served as an unidentified server",
                     self.name)
            return False
        found = servers.agreed([servers.identify(header, body) for header, body in answers])  # type: ignore[misc]
        self._use(found or servers.UNIDENTIFIED)
        log.info("vendor %s: the server is %s", self.name,
                 f"{found.title}'s ({found.known_from})" if found else "not one the gateway knows: it is served as "
                 "an unidentified server (docs/vendors.md); name it with the `server` option")
        return True

    async def _identify_later(self) -> None:
        delay = RETRY_IDENTIFY
        while True:
            await asyncio.sleep(delay)
            if await self._identify():
                return
            delay = min(delay * 2, 60.0)

    def _error(self, status: int, body: bytes, retry_after: str | None) -> GatewayError:
        return vendor_error(self._config, status, error_message(body), retry_after)


def _headers(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"} if secret else {}
