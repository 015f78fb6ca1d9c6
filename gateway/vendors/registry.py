"""The vendor protocols, and the configured vendors by name, each with the adapter of its protocol.

`PROTOCOLS` is the one list of protocols: the settings loader learns from it which option names
GATEWAY_VENDOR_<NAME>_<OPTION> may carry, the capability document lists its columns from it, and
a vendor's `protocol` picks its adapter here. A new protocol is one module in this package and
one line below.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping

from pydantic import ValidationError

from gateway.core import config
from gateway.core.config import Settings, VendorConfig
from gateway.core.endpoint import Endpoint
from gateway.core.errors import BadRequest, ConfigError, NotFound, clip
from gateway.vendors.anthropic.adapter import AnthropicAdapter
from gateway.vendors.base import Adapter
from gateway.vendors.gemini.adapter import GeminiAdapter
from gateway.vendors.local.adapter import LocalAdapter
from gateway.vendors.openai.adapter import OpenAIAdapter

PROTOCOLS: dict[str, type[Adapter]] = {
    adapter.protocol: adapter  # type: ignore[misc]
    for adapter in (OpenAIAdapter, AnthropicAdapter, GeminiAdapter, LocalAdapter)
}


def option_names() -> frozenset[str]:
    """Every protocol's own option names (what GATEWAY_VENDOR_<NAME>_<OPTION> may name)."""
    return frozenset(name for adapter in PROTOCOLS.values() for name in adapter.Options.model_fields)


def protocols() -> dict[str, config.Protocol]:
    """What the settings loader needs to know of each protocol, as its adapter declares it."""
    return {name: config.Protocol(frozenset(adapter.Options.model_fields), adapter.default_base_url,
                                  adapter.hosted_url)
            for name, adapter in PROTOCOLS.items()}


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The gateway's settings (gateway/core/config.py), with the vendors the protocols can serve."""
    return config.load(env, protocols())


def options_of(vendor: VendorConfig) -> tuple[type[Adapter], object]:
    """A vendor's adapter class and its options, validated by the protocol's `Options` model."""
    adapter = PROTOCOLS.get(vendor.protocol)
    if adapter is None:
        raise ConfigError(f"vendor {vendor.name!r}: unknown protocol {vendor.protocol!r} "
                          f"(known: {', '.join(PROTOCOLS)})")
    try:
        return adapter, adapter.Options.model_validate(dict(vendor.options))
    except ValidationError as exc:
        raise ConfigError(f"vendor {vendor.name!r} (protocol {vendor.protocol}): {config.describe(exc)}") from None


def build(vendor: VendorConfig, settings: Settings) -> Adapter:
    adapter, options = options_of(vendor)
    return adapter(vendor, options, settings)  # type: ignore[call-arg]


class Registry:
    def __init__(self, adapters: dict[str, Adapter]) -> None:
        self._adapters = adapters

    @classmethod
    def from_settings(cls, settings: Settings) -> Registry:
        return cls({name: build(vendor, settings) for name, vendor in settings.vendors.items()})

    def __iter__(self) -> Iterator[Adapter]:
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

    def serving(self, vendor: str, model: str, endpoint: Endpoint) -> Adapter:
        """The adapter of `vendor` for its `model` on `endpoint`: a 404 for a vendor not configured,
        and for a model the vendor is known not to serve (the embedded vendor names its one model),
        a 400 naming vendor and endpoint for an endpoint its protocol has no translator for, all
        before any vendor call, so none is a ledger row (docs/usage.md). Any other vendor's models
        are its to say: its 404 is a row, `rejected`."""
        adapter = self.get(vendor)
        own = getattr(adapter, "model", None)
        if isinstance(own, str) and model != own:
            raise NotFound(f"vendor '{vendor}' has no model '{clip(model)}'; its models: {own}", code="unknown_model",
                           param="model", vendor=vendor)
        if endpoint not in adapter.translators:
            raise BadRequest(f"vendor '{vendor}' (protocol {adapter.protocol}) does not serve {endpoint.path}",
                             code="unsupported_endpoint", param="model", vendor=vendor)
        return adapter

    async def start(self) -> None:
        # Together: a vendor may ask its server which it is (vendors/openai/adapter.py), bounded, as it starts.
        await asyncio.gather(*(adapter.start() for adapter in self._adapters.values()))

    async def close(self) -> None:
        for adapter in self._adapters.values():
            await adapter.close()

    def not_ready(self) -> dict[str, str]:
        return {name: why for name, adapter in self._adapters.items() if (why := adapter.not_ready())}
