"""Prices: the packaged table, the `[prices."vendor/model"]` configuration, and the one rule from a
request's token counts to its cost in nano-dollars (gateway/store/prices.py)."""

from __future__ import annotations

import tomllib
from datetime import UTC, date, datetime
from decimal import Decimal
from importlib.resources import files

import pytest

from gateway.core.config import PriceConfig
from gateway.core.errors import ConfigError
from gateway.services import load_settings
from gateway.store.prices import Prices, packaged

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
NO_LOCAL = {"GATEWAY_VENDOR_LOCAL_ENABLED": "0"}


def configured(**entries: dict) -> Prices:
    return Prices.load({model: [PriceConfig.model_validate(e)] for model, e in entries.items()})


def test_every_packaged_price_says_when_it_took_effect_and_where_it_was_read():
    table = tomllib.loads((files("gateway.store") / "prices.toml").read_text())
    assert isinstance(table["read"], date)
    for entry in table["price"]:
        assert entry["source"].startswith("https://"), entry["model"]
        assert isinstance(entry["since"], date) and entry["since"] <= date(2027, 1, 1), entry["model"]
    models = {entry["model"].partition("/")[0] for entry in table["price"]}
    assert models == {"openai", "anthropic", "gemini"}  # the vendors the key shortcuts configure
    assert set(packaged()) >= {e["model"] for e in table["price"]}


def test_cost_is_input_cached_and_output_at_their_rates_with_cached_tokens_not_counted_twice():
    prices = configured(**{"v/m": {"input": 3, "output": 15, "cached_input": 0.3, "cache_write": 3.75}})
    # 10,000 prompt tokens of which 6,000 read from the cache and 1,000 written to it, 500 generated.
    cost = prices.cost_nanos("v/m", 10_000, 500, 6_000, NOW, cache_write_tokens=1_000)
    assert cost == (3_000 * 3 + 6_000 * Decimal("0.3") + 1_000 * Decimal("3.75") + 500 * 15) * 1000  # µ$ -> n$
    # Without a cached rate, a cached token costs what any prompt token does (never nothing).
    plain = configured(**{"v/m": {"input": 3, "output": 15}})
    assert plain.cost_nanos("v/m", 10_000, 500, 6_000, NOW) == plain.cost_nanos("v/m", 10_000, 500, 0, NOW)
    # A vendor claiming more cached tokens than prompt tokens is held to its prompt.
    assert prices.cost_nanos("v/m", 100, 0, 10**6, NOW) == 100 * 300


def test_a_cost_is_exact_in_pico_dollars_and_rounded_half_up_to_the_nano_dollar():
    prices = configured(**{"v/a": {"input": 0.0005, "output": 0}, "v/b": {"input": 0.000123, "output": 0}})
    assert prices.cost_nanos("v/a", 1, 0, 0, NOW) == 1  # 0.5 n$ rounds up
    assert prices.cost_nanos("v/a", 3, 0, 0, NOW) == 2  # 1.5 n$
    assert prices.cost_nanos("v/b", 1000, 0, 0, NOW) == 123  # exact once summed: 1000 x 0.123 n$
    with pytest.raises(ConfigError, match="no more than 6 decimal places"):
        load_settings(NO_LOCAL | {"GATEWAY_PRICES": '{"v/c": {"input": 0.0000001, "output": 1}}'})


def test_unpriced_is_none_never_zero_and_the_embedded_model_is_free_unless_configured():
    prices = Prices.load()
    assert prices.cost_nanos("vllm/unknown-model", 10, 10, 0, NOW) is None
    assert prices.cost_nanos("local/smollm2-135m", 10_000, 10_000, 0, NOW) == 0
    paid = configured(**{"local/smollm2-135m": {"input": 1, "output": 2}})
    assert paid.cost_nanos("local/smollm2-135m", 1_000_000, 0, 0, NOW) == 10**9


def test_the_price_in_force_at_the_requests_start_applies():
    prices = Prices.load()
    model = "gemini/gemini-3.8-flash"  # introductory rates through 2026-12-31
    assert prices.cost_nanos(model, 1_000_000, 0, 0, datetime(2026, 12, 31, 23, 59, tzinfo=UTC)) == 750_000_000
    assert prices.cost_nanos(model, 1_000_000, 0, 0, datetime(2027, 1, 1, tzinfo=UTC)) == 1_500_000_000
    assert prices.cost_nanos(model, 1_000_000, 0, 0, datetime(2026, 1, 1, tzinfo=UTC)) is None  # before its release
    assert prices.price("anthropic/claude-sonnet-4-5-20250929", NOW) == prices.price("anthropic/claude-sonnet-4-5", NOW)


def test_a_long_prompt_tier_applies_per_vendor_call():
    prices = Prices.load()
    model = "gemini/gemini-2.5-pro"  # over 200,000 prompt tokens: every token at the higher rates
    assert prices.cost_nanos(model, 200_000, 1_000, 0, NOW) == (200_000 * 1250 + 1_000 * 10_000)
    assert prices.cost_nanos(model, 200_001, 1_000, 0, NOW) == (200_001 * 2500 + 1_000 * 15_000)
    # The same tokens over two calls (n fanned out): 150,000 a call is the lower tier.
    assert prices.cost_nanos(model, 300_000, 0, 0, NOW, vendor_calls=2) == 300_000 * 1250


def test_configured_prices_in_the_issues_form_add_to_and_replace_the_packaged_table(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text('[prices."vllm/meta-llama/Llama-3.1-8B-Instruct"]\ninput = 0.10\noutput = 0.20\n'
                      'cached_input = 0.05\n\n'
                      '[[prices."openai/gpt-3.5-turbo-instruct"]]\ninput = 1\noutput = 1\n\n'
                      '[[prices."openai/gpt-3.5-turbo-instruct"]]\nsince = 2027-01-01\ninput = 2\noutput = 2\n')
    settings = load_settings(NO_LOCAL | {"GATEWAY_CONFIG": str(config)})
    prices = Prices.load(settings.prices)
    assert prices.cost_nanos("vllm/meta-llama/Llama-3.1-8B-Instruct", 1_000, 1_000, 500, NOW) == 500 * 100 + 500 * 50 + 1_000 * 200
    instruct = "openai/gpt-3.5-turbo-instruct"
    assert prices.cost_nanos(instruct, 1_000, 0, 0, datetime(2020, 1, 1, tzinfo=UTC)) == 1_000_000
    assert prices.cost_nanos(instruct, 1_000, 0, 0, datetime(2027, 2, 1, tzinfo=UTC)) == 2_000_000
    env = load_settings(NO_LOCAL | {"GATEWAY_PRICES": '{"x/y": {"input": 1, "output": 2}}'})
    assert Prices.load(env.prices).cost_nanos("x/y", 1, 1, 0, NOW) == 3_000


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"x/y": {"input": 1}}', "price of 'x/y' output: Field required"),
        ('{"x/y": {"input": -1, "output": 1}}', "price of 'x/y' input"),
        ('{"x/y": {"input": 1, "output": 1, "cache": 1}}', "price of 'x/y' cache: Extra inputs"),
        ('{"x/y": {"input": "free", "output": 1}}', "price of 'x/y' input"),
        ("not json", "not JSON"),
    ],
)
def test_a_bad_price_is_a_clear_error_naming_the_model(value, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(NO_LOCAL | {"GATEWAY_PRICES": value})
