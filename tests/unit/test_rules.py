"""What a limit is (gateway/limits/rules.py): what a request counts in each unit of budget, a cache
hit included, and what it reserves before it runs."""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.limits.rules import TOKENS, USD
from gateway.store.meter import CACHE_HIT
from gateway.store.prices import Price, Prices, Rates


def test_a_cache_hit_counts_in_dollars_what_it_is_billed_and_in_no_tokens():
    prices = Prices({"fake/priced": [Price(datetime.min.replace(tzinfo=UTC), Rates(1_000_000, 2_000_000, 0, 0))]})
    hit = {"outcome": CACHE_HIT, "total_tokens": 14, "cost_nanos": 12_000_000}
    request = {"outcome": "completed", "total_tokens": 14, "cost_nanos": 24_000_000}
    assert (USD.used(hit), TOKENS.used(hit)) == (12_000_000, 0)
    assert (USD.used(request), TOKENS.used(request)) == (24_000_000, 14)
    # 4 + 10 tokens at $1 and $2 per 1M cost 24,000 nano-dollars: billed half, a hit reserves
    # 12,000 of a budget in dollars, and none of one in tokens.
    assert USD.reserved(prices, "fake/priced", 4, 10) == 24_000
    assert USD.reserved(prices, "fake/priced", 4, 10, hit_share=0.5) == 12_000
    assert TOKENS.reserved(prices, "fake/priced", 4, 10, hit_share=0.5) == 0
    assert USD.reserved(prices, "fake/unpriced", 4, 10, hit_share=0.5) is None  # no price: it cannot be kept
