"""The embedded default vendor `local/`: a small GGUF model served in-process by llama.cpp's
server engine (vendors/local/engine.py), so a fresh clone answers with no key and no network.
The adapter holds the engine, loads the model in the background and translates the engine's
failures; each endpoint is its translator (completions.py, chat.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel

from gateway.core.config import Settings, VendorConfig
from gateway.core.endpoint import Endpoint
from gateway.core.errors import BadRequest, ConfigError, GatewayError, NotFound, VendorFailed, VendorNotReady
from gateway.core.parameters import Capabilities
from gateway.vendors.local.chat import CHAT, LocalChat
from gateway.vendors.local.completions import LocalCompletions, capabilities
from gateway.vendors.local.engine import Engine, EngineError
from gateway.vendors.local.inference import LocalInference
from gateway.vendors.local.model import LocalOptions, engine_options

log = logging.getLogger("gateway")


class LocalAdapter:
    protocol: ClassVar[str] = "local"
    default_base_url: ClassVar[str] = ""  # in-process: no URL at all
    hosted_url: ClassVar[str] = ""

    Options: ClassVar[type[BaseModel]] = LocalOptions
    # Each endpoint's support records for given options.
    capabilities_of: ClassVar[Mapping[Endpoint, Callable[[Any], Capabilities]]] = {
        Endpoint.COMPLETIONS: capabilities, Endpoint.CHAT: lambda options: CHAT,
        Endpoint.RESPONSES: lambda options: CHAT}  # bridged to chat (endpoints/responses/request.py)

    def __init__(self, config: VendorConfig, options: LocalOptions, settings: Settings,
                 engine: Engine | None = None) -> None:
        """`engine` replaces the llama.cpp engine the options describe (in-process tests)."""
        if config.deployments:
            raise ConfigError(f"vendor {config.name!r}: the embedded model runs in this process; it has no deployments")
        self.name = config.name
        self.capabilities = capabilities(options)
        self.chat_capabilities = CHAT
        self.translators = {Endpoint.COMPLETIONS: LocalCompletions(self, self.capabilities),
                            Endpoint.CHAT: LocalChat(self, self.chat_capabilities),
                            Endpoint.INFERENCE: LocalInference(self)}
        self.translators[Endpoint.RESPONSES] = self.translators[Endpoint.CHAT]  # bridged to chat
        prepared = engine_options(config.name, options, quiet=settings.log_level != "debug")
        self.model = prepared.alias
        self._engine = engine or Engine(prepared)
        self._loading: asyncio.Task[None] | None = None
        self._loaded = False
        self._failure: str | None = None

    async def start(self) -> None:
        """Load the model in the background: /readyz reports it, requests wait for nothing."""
        self._loading = asyncio.create_task(self._load())

    async def _load(self) -> None:
        path = self._engine.options.model_path
        started = time.perf_counter()
        try:
            await asyncio.to_thread(self._engine.load)
        except Exception as exc:
            self._failure = f"cannot load model {path}: {exc}"
            log.error("vendor '%s': %s", self.name, self._failure)
            return
        self._loaded = True
        log.info("vendor '%s': model '%s' (%s) loaded and warmed up in %.2f s", self.name, self.model, path,
                 time.perf_counter() - started)

    async def close(self) -> None:
        if self._loading is not None:
            await self._loading  # a load cannot be interrupted; a small model's is short
        await self._engine.close()

    def count_tokens(self, model: str, text: str) -> int:
        """vendors.base.CountsTokens: the ledger's estimate of a cut stream, with the model's own tokenizer."""
        return self._engine.count_tokens(text)

    def not_ready(self) -> str | None:
        if self._failure:
            return self._failure
        return None if self._loaded else f"loading model '{self.model}'"

    def _ready(self, model: str) -> None:
        """Refuse a model the engine does not run, or any request while it is not loaded."""
        if model != self.model:
            raise NotFound(f"vendor '{self.name}' has no model '{model}'; its models: {self.model}",
                           code="unknown_model", param="model", vendor=self.name)
        if not self._loaded:
            raise VendorNotReady(f"vendor '{self.name}' is not ready: {self.not_ready()}", code="vendor_not_ready",
                                 vendor=self.name, retry_after=None if self._failure else 1)

    def _invalid(self, param: str, why: str) -> BadRequest:
        return BadRequest(f"vendor '{self.name}': {why}", code="invalid_value", param=param, vendor=self.name)

    def _error(self, exc: EngineError) -> GatewayError:
        if exc.kind == "exceed_context_size_error":
            return BadRequest(f"vendor '{self.name}': prompt too long: {exc.message}",
                                  code="context_length_exceeded", param="prompt", vendor=self.name)
        if 400 <= exc.status < 500:
            return BadRequest(f"vendor '{self.name}' rejected the request: {exc.message}",
                                  code="vendor_rejected", vendor=self.name)
        return VendorFailed(f"vendor '{self.name}' failed: {exc.message}", code="vendor_error", vendor=self.name)
