"""The OpenAI protocol's adapter: one vendor of OpenAI itself or of any OpenAI-compatible server
(vLLM, llama.cpp's server, Ollama, Together, Fireworks...), configured with a base URL. It finds
out which server it fronts as it starts (vendors/openai/servers.py) and serves each endpoint by
its translator (completions.py, chat.py), with what the server lacks emulated or refused.

    server = "auto"               # or openai, llama.cpp, vllm, sglang, ollama, unidentified
    lacks = ["echo", "best_of"]   # any request parameter, or "prompt" for list prompts
    max_stop = 1                  # stop sequences it takes per request; more are matched by the gateway
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, NonNegativeInt, field_validator

from gateway.core.config import Names, Settings, VendorConfig
from gateway.core.endpoint import Endpoint
from gateway.core.errors import GatewayError
from gateway.core.parameters import CHAT_PARAMETERS, PARAMETERS, Capabilities
from gateway.vendors.openai import servers
from gateway.vendors.openai.chat import CHAT_COMPLETIONS, OpenAIChat, chat_capabilities
from gateway.vendors.openai.completions import ALWAYS_SENT, COMPLETIONS, OpenAICompletions, capabilities
from gateway.vendors.openai.servers import Server
from gateway.vendors.transport.http import HttpAdapter
from gateway.vendors.vendor_errors import error_message, vendor_error

log = logging.getLogger("gateway.vendors")

MODELS = "/models"  # what the server is identified by
# Seconds the server's identification may take as the gateway starts; an unanswered one is asked
# again in the background, RETRY_IDENTIFY seconds later at first, doubling to a minute.
IDENTIFY_TIMEOUT = 5.0
RETRY_IDENTIFY = 5.0


class OpenAIOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Which server it is (vendors/openai/servers.py): "auto" finds out as the gateway starts.
    server: str = servers.AUTO
    lacks: Names = frozenset()  # request parameters (or "prompt" for list prompts) the server does not implement
    # Stop sequences it takes per request (0: none); more are matched by the gateway.
    max_stop: NonNegativeInt | None = None

    @field_validator("server")
    @classmethod
    def _server(cls, server: str) -> str:
        if server != servers.AUTO and server not in servers.SERVERS:
            raise ValueError(f"names no known server (known: {', '.join([servers.AUTO, *servers.SERVERS])})")
        return server

    @field_validator("lacks")
    @classmethod
    def _known(cls, lacks: frozenset[str]) -> frozenset[str]:
        unknown = lacks - set(PARAMETERS) - set(CHAT_PARAMETERS) - set(CHAT_PARAMETERS)
        if unknown:
            raise ValueError(f"names unknown parameters: {', '.join(sorted(unknown))}")
        return lacks


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

    def __init__(self, config: VendorConfig, options: OpenAIOptions, settings: Settings) -> None:
        super().__init__(config, settings, _headers, paths=(COMPLETIONS, CHAT_COMPLETIONS))
        self._options = options
        self._declared = servers.declared(options.server, (target.base_url for target in config.targets))
        self._identifying: asyncio.Task[None] | None = None
        self._use(self._declared or servers.UNIDENTIFIED)
        self.translators = {Endpoint.COMPLETIONS: OpenAICompletions(self), Endpoint.CHAT: OpenAIChat(self)}

    def _use(self, server: Server) -> None:
        """Serve as `server` does: the capabilities the planner reads, and what goes on the wire."""
        self.server = server
        self.capabilities = capabilities(self._options, server)
        self.chat_capabilities = chat_capabilities(server, self._options.lacks)
        # The parameters put on the wire as they are: only what is native (an emulated or
        # unsupported one never reaches the vendor), in the contract's order.
        self._forwarded = tuple(name for name in PARAMETERS if name in self.capabilities.native
                                and name not in ALWAYS_SENT)
        self._logprobs_zero = 0 if server.zero_logprobs else 1  # what `logprobs: 0` is sent as

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
