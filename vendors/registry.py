"""Configured vendors by name, each with the adapter of its protocol."""

from __future__ import annotations

import importlib

from gateway.config import Settings
from gateway.errors import ConfigError, NotFound
from vendors.base import Adapter

# protocol -> "module:class"; imported only when a vendor uses it (the local engine is heavy).
PROTOCOLS = {
    "openai": "vendors.openai:OpenAIAdapter",
    "anthropic": "vendors.anthropic:AnthropicAdapter",
    "gemini": "vendors.gemini:GeminiAdapter",
    "local": "vendors.local:LocalAdapter",
}


class Registry:
    def __init__(self, adapters: dict[str, Adapter]) -> None:
        self._adapters = adapters

    @classmethod
    def from_settings(cls, settings: Settings) -> Registry:
        adapters: dict[str, Adapter] = {}
        for name, config in settings.vendors.items():
            target = PROTOCOLS.get(config.protocol)
            if target is None:
                raise ConfigError(f"vendor {name!r}: unknown protocol {config.protocol!r} (known: {', '.join(PROTOCOLS)})")
            module, _, cls_name = target.partition(":")
            adapter_cls = getattr(importlib.import_module(module), cls_name)
            adapters[name] = adapter_cls(config, settings)
        return cls(adapters)

    def __iter__(self):
        return iter(self._adapters.values())

    def names(self) -> list[str]:
        return sorted(self._adapters)

    def get(self, vendor: str) -> Adapter:
        adapter = self._adapters.get(vendor)
        if adapter is None:
            configured = ", ".join(self.names()) or "none"
            raise NotFound(
                f"unknown vendor '{vendor}' in model; configured vendors: {configured}",
                code="unknown_vendor",
                param="model",
                vendor=vendor,
            )
        return adapter

    async def start(self) -> None:
        for adapter in self._adapters.values():
            await adapter.start()

    async def close(self) -> None:
        for adapter in self._adapters.values():
            await adapter.close()

    def not_ready(self) -> dict[str, str]:
        return {name: why for name, adapter in self._adapters.items() if (why := adapter.not_ready())}
