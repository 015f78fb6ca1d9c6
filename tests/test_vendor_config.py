"""Configuring the Anthropic, Gemini and OpenAI-compatible vendors: shortcuts, defaults, options."""

from __future__ import annotations

import pytest

from gateway.core.config import ConfigError, Settings, VendorConfig
from gateway.core.parameters import Capabilities
from gateway.services import load_settings
from gateway.vendors import registry


def load(**env: str) -> Settings:
    return load_settings({"GATEWAY_VENDOR_LOCAL_ENABLED": "0", **env})


def capabilities(vendor: VendorConfig) -> Capabilities:
    adapter, options = registry.options_of(vendor)
    return adapter.capabilities_of(options)


def test_api_key_shortcuts_configure_the_hosted_vendors():
    vendors = load(ANTHROPIC_API_KEY="a-key", GEMINI_API_KEY="g-key", GEMINI_BASE_URL="http://proxy/v1beta/").vendors
    assert (vendors["anthropic"].protocol, vendors["anthropic"].base_url, vendors["anthropic"].secret) == (
        "anthropic", "https://api.anthropic.com", "a-key")
    assert (vendors["gemini"].protocol, vendors["gemini"].base_url) == ("gemini", "http://proxy/v1beta")


def test_hosted_protocols_default_their_endpoint_but_openai_compatible_servers_do_not():
    vendors = load(GATEWAY_VENDOR_CLAUDE_PROTOCOL="anthropic", GATEWAY_VENDOR_VLLM_PROTOCOL="openai").vendors
    assert vendors["claude"].base_url == "https://api.anthropic.com"
    assert vendors["vllm"].base_url == ""


def test_options_from_the_environment_reach_the_capabilities():
    vendors = load(GATEWAY_VENDOR_LLAMA_PROTOCOL="openai", GATEWAY_VENDOR_LLAMA_LACKS="echo, best_of",
                   GATEWAY_VENDOR_LLAMA_MAX_STOP="2", GATEWAY_VENDOR_G_PROTOCOL="gemini",
                   GATEWAY_VENDOR_G_MAX_CANDIDATES="8").vendors
    llama = capabilities(vendors["llama"])
    assert {"echo", "best_of"}.isdisjoint(llama.native) and llama.per_call("stop") == 2
    g = capabilities(vendors["g"])
    assert "n" in g.native and g.per_call("n") == 8


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GATEWAY_VENDOR_X_PROTOCOL": "openai", "GATEWAY_VENDOR_X_LACKS": "echo,nope"}, "unknown parameters"),
        ({"GATEWAY_VENDOR_X_PROTOCOL": "openai", "GATEWAY_VENDOR_X_MAX_STOP": "-1"}, "max_stop"),
        ({"GATEWAY_VENDOR_X_PROTOCOL": "gemini", "GATEWAY_VENDOR_X_MAX_CANDIDATES": "0"}, "max_candidates"),
    ],
)
def test_bad_options_fail_at_start_up(env, message):
    with pytest.raises(ConfigError, match=message):
        registry.Registry.from_settings(load(**env))


def test_prompt_as_must_be_prefill_or_user():
    config = load(GATEWAY_VENDOR_X_PROTOCOL="anthropic", GATEWAY_VENDOR_X_PROMPT_AS="system").vendors["x"]
    with pytest.raises(ConfigError, match="prompt_as"):
        registry.build(config, Settings())
