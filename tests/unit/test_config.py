"""The settings model: each setting declared once, its environment name derived from it, TOML
underneath, secrets never shown, and a clear error naming what is wrong."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from gateway.core.config import SERVER_FIELDS, Settings, stray_variables
from gateway.core.errors import ConfigError
from gateway.services import load_settings
from gateway.vendors.registry import option_names

NO_LOCAL = {"GATEWAY_VENDOR_LOCAL_ENABLED": "0"}
# A valid value other than the default for each kind of setting.
SAMPLES = {int: "4242", float: "2.5", bool: "1", str: "something-else"}


def sample(name: str) -> tuple[str, object]:
    if name == "log_level":
        return "DEBUG", "debug"  # case does not matter
    if name == "limits_on_store_failure":
        return "closed", "closed"
    if name == "log_format":
        return "json", "json"
    if name == "cache":
        return "memory", "memory"
    if name == "cache_hit_price":
        return "0.5", 0.5
    if name == "cors_origins":
        return "https://app.example.com, http://127.0.0.1:8080", frozenset({"https://app.example.com",
                                                                          "http://127.0.0.1:8080"})
    default = Settings.model_fields[name].default
    if isinstance(default, SecretStr):
        return "sqlite:///elsewhere/gateway.db", SecretStr("sqlite:///elsewhere/gateway.db")
    if default is True:
        return "0", False
    raw = SAMPLES[type(default)]
    return raw, type(default)(raw) if not isinstance(default, bool) else True


@pytest.mark.parametrize("name", SERVER_FIELDS)
def test_every_setting_is_read_from_its_derived_environment_name(name):
    raw, expected = sample(name)
    settings = load_settings(NO_LOCAL | {f"GATEWAY_{name.upper()}": raw})
    assert getattr(settings, name) == expected != getattr(Settings(), name)


def test_the_environment_overrides_the_toml_file(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text('[gateway]\nport = 9001\nmax_concurrent = 7\n\n[vendors.vllm]\nprotocol = "openai"\n'
                      'base_url = "http://10.0.0.5:8000/v1"\nlacks = ["echo"]\n')
    settings = load_settings(NO_LOCAL | {"GATEWAY_CONFIG": str(config), "GATEWAY_PORT": "9002"})
    assert (settings.port, settings.max_concurrent) == (9002, 7)
    assert settings.vendors["vllm"].options == {"lacks": ["echo"]}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GATEWAY_PORT": "eighty"}, "GATEWAY_PORT"),
        ({"GATEWAY_PORT": "70000"}, "GATEWAY_PORT"),
        ({"GATEWAY_MAX_CONCURRENT": "0"}, "GATEWAY_MAX_CONCURRENT"),
        ({"GATEWAY_HTTP_TRANSPORT": "aiohttp"}, "GATEWAY_HTTP_TRANSPORT is no longer a setting"),
        ({"GATEWAY_VENDOR_X_PROTOCOL": "openai", "GATEWAY_VENDOR_X_NOPE": "1"}, "unknown vendor setting"),
        ({"GATEWAY_VENDOR_X_PROTOCOL": "openai", "GATEWAY_VENDOR_X_CONNECT": "-1"}, "vendor 'x'.*connect"),
        ({"GATEWAY_VENDOR_X_PROTOCOL": "openai", "GATEWAY_VENDOR_X_ENABLED": "perhaps"}, "vendor 'x' enabled"),
        ({"GATEWAY_VENDOR_X_PROTOCOL": "openai", "GATEWAY_VENDOR_X_API_KEY_ENV": "UNSET_KEY"}, "UNSET_KEY"),
        ({"GATEWAY_FALLBACKS": "gpt-4o=claude"}, "vendor/name"),
        ({"GATEWAY_ALIASES": "gpt-4o=gpt-4o"}, "an alias stands for a model written vendor/name"),
        ({"GATEWAY_ALIASES": "openai/gpt-4o=local/smollm2-135m"}, "an alias is a name without '/'"),
        ({"GATEWAY_ALIASES": "gpt-4o=openai/gpt-4o"}, "'openai' is no configured vendor"),
        ({"GATEWAY_LOG_FORMAT": "xml"}, "GATEWAY_LOG_FORMAT"),
        ({"GATEWAY_CORS_ORIGINS": "https://app.example.com/"}, "GATEWAY_CORS_ORIGINS.*not an origin"),
    ],
)
def test_a_bad_setting_is_a_clear_error_naming_it(env, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(NO_LOCAL | env)


def test_aliases_from_the_file_and_the_environment(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text(VENDOR_X + '[aliases]\n"gpt-4o" = "x/gpt-4o"\n"llama3:8b" = "x/meta/llama-3-8b"\n')
    settings = load_settings(NO_LOCAL | {"GATEWAY_CONFIG": str(config), "GATEWAY_ALIASES": " o1 = x/o1 ; gpt-4o=x/m "})
    assert settings.aliases == {"gpt-4o": "x/m", "llama3:8b": "x/meta/llama-3-8b", "o1": "x/o1"}
    assert "GATEWAY_ALIASES" not in stray_variables({"GATEWAY_ALIASES": "a=x/b"})


def test_unknown_toml_settings_are_refused(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text("[gateway]\nprot = 1\n")
    with pytest.raises(ConfigError, match="unknown \\[gateway\\] settings: prot"):
        load_settings({"GATEWAY_CONFIG": str(config)})


def test_vendor_names_may_contain_underscores_and_every_protocol_option_has_an_environment_name():
    settings = load_settings(NO_LOCAL | {"GATEWAY_VENDOR_MY_VLLM_PROTOCOL": "openai",
                                         "GATEWAY_VENDOR_MY_VLLM_BASE_URL": "http://h/v1",
                                         "GATEWAY_VENDOR_MY_VLLM_MAX_STOP": "1"})
    assert settings.vendors["my_vllm"].base_url == "http://h/v1"
    assert settings.vendors["my_vllm"].options == {"max_stop": "1"}
    assert {"lacks", "max_stop", "prompt_as", "user_turn_models", "max_candidates", "model_path", "parallel",
            "context_size", "threads"} <= option_names()


def test_a_vendor_key_is_kept_secret():
    settings = load_settings(NO_LOCAL | {"OPENAI_API_KEY": "sk-live-very-secret"})
    vendor = settings.vendors["openai"]
    assert vendor.secret == "sk-live-very-secret"
    assert "sk-live-very-secret" not in repr(settings) and "sk-live-very-secret" not in str(vendor)
    assert "sk-live-very-secret" not in settings.model_dump_json()


def test_a_database_password_is_kept_secret():
    url = "postgresql://gw:hunter2@db.internal:5432/ledger"
    settings = load_settings(NO_LOCAL | {"GATEWAY_DATABASE_URL": url})
    assert settings.database_url.get_secret_value() == url
    assert "hunter2" not in repr(settings) and "hunter2" not in settings.model_dump_json()


def test_a_protocol_declares_its_own_endpoints_and_key_shortcut():
    """A new hosted protocol needs no change to the settings loader: what its adapter declares
    makes <PROTOCOL>_API_KEY configure a vendor at its endpoint, and names its default base URL."""
    from gateway.core import config

    protocols = {"acme": config.Protocol(frozenset({"region"}), "https://api.acme.test/v2", "https://api.acme.test/v2"),
                 "compat": config.Protocol(frozenset())}
    settings = config.load({"ACME_API_KEY": "k-acme", "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
                            "GATEWAY_VENDOR_OTHER_PROTOCOL": "acme", "GATEWAY_VENDOR_OTHER_REGION": "eu"}, protocols)
    assert (settings.vendors["acme"].base_url, settings.vendors["acme"].secret) == ("https://api.acme.test/v2", "k-acme")
    assert (settings.vendors["other"].base_url, settings.vendors["other"].options) == ("https://api.acme.test/v2",
                                                                                         {"region": "eu"})
    with pytest.raises(ConfigError, match=r"needs a protocol \(acme, compat\)"):
        config.load({"GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_VENDOR_X_BASE_URL": "http://x"}, protocols)


VENDOR_X = '[vendors.x]\nprotocol = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[gatway]\nport = 1\n", r"^\[gatway\]: no such table .*did you mean gateway\?"),
        ('[vendor.x]\nprotocol = "openai"\n', r"^\[vendor\]: no such table .*did you mean vendors\?"),
        ('[fallback]\n"x/m" = ["x/n"]\n', r"^\[fallback\]: no such table .*did you mean fallbacks\?"),
        ("vendors = 5\n", "vendors: a table"),
        ("[vendors]\nx = 5\n", "vendor 'x': a table"),
        (VENDOR_X + '[fallbacks]\n"x/m" = ["nope/m"]\n', "'nope/m' is on no configured vendor"),
        (VENDOR_X + '[fallbacks]\n"nope/m" = ["x/m"]\n', "'nope/m' is on no configured vendor"),
        (VENDOR_X + '[fallbacks]\n"x/m" = ["x/n"]\n"x/n" = ["x/m"]\n', "a cycle: 'x/m' -> 'x/n' -> 'x/m'"),
        (VENDOR_X + '[fallbacks]\n"x/m" = ["x/m"]\n', "falls back to itself"),
        (VENDOR_X + '[fallbacks]\n"x/m" = "x/n"\n', "give an array of models"),
        (VENDOR_X + '[aliases]\n"m" = ["x/m"]\n', "an alias stands for a model written vendor/name"),
        (VENDOR_X + '[aliases]\n"m" = "nope/m"\n', "'nope' is no configured vendor"),
        (VENDOR_X + '[alias]\n"m" = "x/m"\n', r"^\[alias\]: no such table .*did you mean aliases\?"),
        ('[vendors."a/b"]\nprotocol = "openai"\nbase_url = "http://h/v1"\n', "vendor 'a/b': a vendor's name"),
        ('[vendors.x]\nprotocol = "openai"\nbase_url = "ftp://h/v1"\n', "not an http:// or https:// URL"),
        ('[vendors.x]\nprotocol = "openai"\ndeployments = [{base_url = "ftp://h"}]\n', "deployments.0.base_url"),
        ('[vendors.x]\nprotocol = "openai"\ndeployments = [{base_url = 5}]\n', "deployment 0 base_url: a string"),
        ('[vendors.x]\nprotocol = "openai"\ndeployments = ["http://h/v1"]\n', "deployments: give a non-empty array"),
        ('[vendors.x]\nprotocol = "openai"\ndeployments = [{base_url = "http://h", weight = "heavy"}]\n',
         "deployments.0.weight"),
    ],
)
def test_a_config_file_mistake_is_a_one_line_error(tmp_path, toml, message):
    config = tmp_path / "gateway.toml"
    config.write_text(toml)
    with pytest.raises(ConfigError, match=message) as refused:
        load_settings(NO_LOCAL | {"GATEWAY_CONFIG": str(config)})
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("typo", "meant"), [("GATEWAY_PORTT", "GATEWAY_PORT"), ("GATEWAY_LOGLEVEL", "GATEWAY_LOG_LEVEL"),
                                           ("GATEWAY_WOKRERS", "GATEWAY_WORKERS"),
                                           ("GATEWAY_REDIS_UR", "GATEWAY_REDIS_URL"), ("GATEWAY_PROT", "GATEWAY_PORT"),
                                           ("GATEWAY_LIMITS_STORE_FAILURE", "GATEWAY_LIMITS_ON_STORE_FAILURE"),
                                           ("GATEWAY_KEY_CACHE", "GATEWAY_KEY_CACHE_SECONDS")])
def test_a_misspelt_setting_is_refused_naming_the_one_it_meant(typo, meant):
    with pytest.raises(ConfigError, match=f"{typo}: no such setting \\(did you mean {meant}\\?\\)"):
        load_settings(NO_LOCAL | {typo: "1"})


def test_other_gateway_variables_are_named_but_not_refused():
    """A launcher's own (the peer benchmark exports GATEWAY_URL, GATEWAY_CHAT_URL...) and the links
    of a Kubernetes Service named `gateway` are not the gateway's: it starts, and they are named."""
    theirs = {"GATEWAY_URL": "http://127.0.0.1:1/v5/completions", "GATEWAY_CHAT_URL": "x", "GATEWAY_READY_URL": "x",
              "GATEWAY_NAME": "ours", "GATEWAY_CMD": "serve", "GATEWAY_HEADERS": "x-api-key: k", "GATEWAY_MODEL": "m",
              "GATEWAY_SERVICE_HOST": "10.0.0.1", "GATEWAY_PORT_8000_TCP_ADDR": "10.0.0.1",
              "GATEWAY_HOME": "/srv", "GATEWAY_LOGS": "/var/log"}  # short names: one letter off at most
    settings = load_settings(NO_LOCAL | theirs)
    assert settings.port == 8000
    assert stray_variables(NO_LOCAL | theirs) == sorted(theirs)


def test_the_tests_and_vendors_own_variables_are_not_stray():
    ours = NO_LOCAL | {"GATEWAY_TEST_DATABASE_URL": "postgresql://x", "GATEWAY_TEST_LAUNCHER": "0",
                       "GATEWAY_CONFIG": "", "GATEWAY_VENDOR_OTHER_PROTOCOL": "openai",
                       "GATEWAY_VENDOR_OTHER_BASE_URL": "http://127.0.0.1:9/v1"}
    load_settings(ours)
    assert stray_variables(ours) == []


def test_a_binary_config_file_is_a_one_line_error(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_bytes(b"\x7fELF\x02\x01\x01\x00\xf0\xff" * 8)
    with pytest.raises(ConfigError, match="not UTF-8 text") as refused:
        load_settings({"GATEWAY_CONFIG": str(config)})
    assert "\n" not in str(refused.value)
