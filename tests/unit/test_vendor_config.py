"""Configuring the Anthropic, Gemini and OpenAI-compatible vendors: shortcuts, defaults, options."""

from __future__ import annotations

import pytest

from gateway.core.endpoint import Endpoint
from gateway.core.config import ConfigError, Settings, VendorConfig
from gateway.core.parameters import Capabilities
from gateway.services import load_settings, redactor
from gateway.vendors import registry


def load(**env: str) -> Settings:
    return load_settings({"GATEWAY_VENDOR_LOCAL_ENABLED": "0", **env})


def capabilities(vendor: VendorConfig) -> Capabilities:
    adapter, options = registry.options_of(vendor)
    return adapter.capabilities_of[Endpoint.COMPLETIONS](options)


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


# -- deployments ------------------------------------------------------------------------------------
ISSUE_FORM = """
[vendors.pool]
protocol = "openai"
api_key_env = "POOL_KEY"              # default for deployments that name none
deployments = [
  { base_url = "http://10.0.0.5:8000/v1" },
  { base_url = "http://10.0.0.6:8000/v1", weight = 2, max_concurrent = 64 },
  { base_url = "https://api.openai.com/v1", api_key_env = "OPENAI_KEY_B" },
]
routing = "least_outstanding"         # or "weighted_random", "p2c_ewma"
"""


def from_toml(tmp_path, text: str, **env: str) -> Settings:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return load(GATEWAY_CONFIG=str(path), **env)


def test_several_deployments_in_the_documented_form(tmp_path):
    pool = from_toml(tmp_path, ISSUE_FORM, POOL_KEY="sk-pool-key-0123", OPENAI_KEY_B="sk-org-b-key-4567").vendors["pool"]
    assert [(d.base_url, d.secret, d.weight, d.max_concurrent, d.name) for d in pool.targets] == [
        ("http://10.0.0.5:8000/v1", "sk-pool-key-0123", 1.0, None, None),
        ("http://10.0.0.6:8000/v1", "sk-pool-key-0123", 2.0, 64, None),
        ("https://api.openai.com/v1", "sk-org-b-key-4567", 1.0, None, None),
    ]
    assert pool.routing == "least_outstanding" and pool.base_url == ""
    assert set(pool.secrets) == {"sk-pool-key-0123", "sk-org-b-key-4567"}
    assert "sk-org-b-key-4567" not in repr(pool) and "sk-org-b-key-4567" not in pool.model_dump_json()
    balancer = registry.build(pool, Settings()).balancer
    assert [m.name for m in balancer.members] == ["0", "1", "2"]


def test_a_vendor_with_one_base_url_is_one_deployment():
    vllm = load(GATEWAY_VENDOR_VLLM_PROTOCOL="openai", GATEWAY_VENDOR_VLLM_BASE_URL="http://h:8000/v1",
                GATEWAY_VENDOR_VLLM_API_KEY="sk-single-key-0000").vendors["vllm"]
    assert vllm.deployments == ()
    (only,) = vllm.targets
    assert (only.base_url, only.secret, vllm.routing) == ("http://h:8000/v1", "sk-single-key-0000", "least_outstanding")
    assert not registry.build(vllm, Settings()).balancer.passive  # nowhere else to go: never ejected


def test_deployments_routing_and_health_from_the_environment():
    pool = load(GATEWAY_VENDOR_POOL_PROTOCOL="openai", GATEWAY_VENDOR_POOL_ROUTING="p2c_ewma",
                GATEWAY_VENDOR_POOL_DEPLOYMENTS='[{"base_url": "http://a/v1", "name": "east"}, '
                                                '{"base_url": "http://b/v1/", "weight": 3, "api_key_env": "KB"}]',
                GATEWAY_VENDOR_POOL_EJECT_AFTER="5", GATEWAY_VENDOR_POOL_COOLDOWN="2", KB="sk-key-b-000000").vendors["pool"]
    assert [(d.name, d.base_url, d.weight, d.secret) for d in pool.targets] == [
        ("east", "http://a/v1", 1.0, ""), (None, "http://b/v1", 3.0, "sk-key-b-000000")]
    assert (pool.routing, pool.health.eject_after, pool.health.cooldown, pool.health.max_cooldown) == (
        "p2c_ewma", 5, 2.0, 300.0)


def test_hosted_protocols_default_each_deployments_url(tmp_path):
    text = '[vendors.claude]\nprotocol = "anthropic"\ndeployments = [{ api_key_env = "A1" }, { api_key_env = "A2" }]\n'
    claude = from_toml(tmp_path, text, A1="sk-ant-org-one", A2="sk-ant-org-two").vendors["claude"]
    assert [(d.base_url, d.secret) for d in claude.targets] == [
        ("https://api.anthropic.com", "sk-ant-org-one"), ("https://api.anthropic.com", "sk-ant-org-two")]


@pytest.mark.parametrize(
    ("table", "env", "message"),
    [
        ('base_url = "http://a/v1"\ndeployments = [{ base_url = "http://b/v1" }]', {}, "either base_url or deployments"),
        ('deployments = [{ base_url = "http://b/v1", api_key_env = "NOPE" }]', {}, "deployment 0: environment variable NOPE"),
        ('api_key_env = "NOPE"\ndeployments = [{ base_url = "http://b/v1" }]', {}, "deployment 0: environment variable NOPE"),
        ('deployments = [{ base_url = "http://b/v1", api_key = "sk-inline" }]', {}, "deployment 0: put the key"),
        ('deployments = [{ weight = 2 }]', {}, "deployment 0 needs a base_url"),
        ('deployments = []', {}, "non-empty array"),
        ('deployments = [{ base_url = "http://b/v1", weight = 0 }]', {}, "weight"),
        ('deployments = [{ base_url = "http://b/v1", max_concurrent = 0 }]', {}, "max_concurrent"),
        ('deployments = [{ base_url = "http://b/v1", colour = "red" }]', {}, "colour"),
        ('deployments = [{ base_url = "http://a", name = "x" }, { base_url = "http://b", name = "x" }]', {},
         "names must differ"),
        ('deployments = [{ base_url = "http://a", name = "a,b" }]', {}, "without spaces or commas"),
        ('deployments = [{ base_url = "http://a", name = "east 1" }]', {}, "without spaces or commas"),
        ('deployments = [{ base_url = "http://a" }]\nrouting = "round_robin"', {}, "routing"),
        ('deployments = [{ base_url = "http://a" }]\ncooldown = 600', {}, "longer than max_cooldown"),
    ],
)
def test_bad_deployments_fail_at_start_up(tmp_path, table, env, message):
    with pytest.raises(ConfigError, match=message):
        from_toml(tmp_path, f'[vendors.pool]\nprotocol = "openai"\n{table}\n', **env)


def test_the_embedded_model_has_no_deployments(tmp_path):
    settings = from_toml(tmp_path, '[vendors.mine]\nprotocol = "local"\ndeployments = [{ base_url = "http://a" }]\n')
    with pytest.raises(ConfigError, match="no deployments"):
        registry.build(settings.vendors["mine"], Settings())


def test_every_deployments_key_is_scrubbed_from_what_leaves_the_gateway(tmp_path):
    settings = from_toml(tmp_path, ISSUE_FORM, POOL_KEY="sk-pool-key-0123", OPENAI_KEY_B="sk-org-b-key-4567")
    redact = redactor(settings)
    assert redact("a sk-pool-key-0123 b sk-org-b-key-4567") == "a [redacted] b [redacted]"
