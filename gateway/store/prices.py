"""What a request cost, in USD: the price table shipped with the gateway (store/prices.toml) plus the
operator's `[prices."vendor/model"]` (core/config.py), and the one rule that turns token counts
into a cost, shared by the ledger (a row's cost, when it is written) and anything that needs a
cost ahead of a row (budgets).

Costs are integers of nano-dollars (10^-9 USD), never floats. A price of P USD per million tokens
is P x 10^6 pico-dollars per token, a whole number for every price with up to six decimals; a
request's cost is exact in pico-dollars and then rounded, half up, to the nano-dollar (so exact for
every price with up to three decimals, which is every figure in the packaged table).

The rule, for counts reported the OpenAI way (every adapter reports them so: `prompt_tokens`
includes the tokens read from and written to the vendor's cache):

    cost = (prompt - cached - cache_written) x input + cached x cached_input
           + cache_written x cache_write + completion x output

at the rates of the price in force at the request's start, or at its `long_prompt` rates when a
vendor call's prompt is longer than the tier's threshold (a request fanned out over several calls
is judged by its prompt tokens per call). `None` means unpriced: no price is known for the model
at that time, which is never the same as a cost of 0. The embedded `local` vendor costs 0 unless
configured.
"""

from __future__ import annotations

import bisect
import tomllib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from importlib.resources import files
from typing import Any

from pydantic import ValidationError

from gateway.core.config import PriceConfig, PriceRates, describe
from gateway.core.errors import ConfigError

NANOS_PER_USD = 10**9
PICOS_PER_NANO = 1000
_PICOS_PER_USD_PER_MILLION = 10**6  # USD per 1M tokens -> pico-dollars per token
FREE_VENDORS = frozenset({"local"})  # the embedded model costs nothing unless a price is configured
_ALWAYS = datetime.min.replace(tzinfo=UTC)


class PackagedPrice(PriceConfig):
    """An entry of store/prices.toml: a configured price, plus whose it is and where it was read."""

    model: str
    aliases: tuple[str, ...] = ()
    since: date  # every packaged figure says when it took effect
    source: str


@dataclass(frozen=True, slots=True)
class Rates:
    """Pico-dollars per token."""

    input: int
    output: int
    cached_input: int
    cache_write: int

    @classmethod
    def of(cls, rates: PriceRates) -> Rates:
        def pico(usd_per_million: Any) -> int:
            return int(usd_per_million * _PICOS_PER_USD_PER_MILLION)  # exact: at most six decimals

        base = pico(rates.input)
        return cls(base, pico(rates.output),
                   base if rates.cached_input is None else pico(rates.cached_input),
                   base if rates.cache_write is None else pico(rates.cache_write))

    def picos(self, fresh: int, cached: int, written: int, completion: int) -> int:
        return (fresh * self.input + cached * self.cached_input + written * self.cache_write
                + completion * self.output)


ZERO = Rates(0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class Price:
    since: datetime  # aware, UTC
    rates: Rates
    long_above: int | None = None  # prompt tokens per vendor call beyond which `long_rates` apply
    long_rates: Rates | None = None
    source: str = "configuration"

    @classmethod
    def of(cls, entry: PriceConfig, source: str = "configuration") -> Price:
        long = entry.long_prompt
        return cls(_instant(entry.since), Rates.of(entry), long.above if long else None,
                   Rates.of(long) if long else None, source)


class Prices:
    """Prices per model, each a timeline of entries by the instant they take effect."""

    def __init__(self, timelines: Mapping[str, Iterable[Price]], free_vendors: Collection[str] = FREE_VENDORS) -> None:
        self._given = {model: list(entries) for model, entries in timelines.items()}
        self._stored: dict[str, list[Price]] = {}
        self._free = frozenset(free_vendors)
        self._timelines = self._merged()

    def use_stored(self, stored: Mapping[str, Iterable[Price]]) -> None:
        """Add the prices an operator stored in the database (store/stored_prices.py) to the
        timelines, in place of those stored before: each takes effect at its `since`, so a price
        stored later wins over the packaged and configured ones, and a request that started
        before it keeps the price it started with."""
        self._stored = {model: list(entries) for model, entries in stored.items()}
        self._timelines = self._merged()  # one assignment: a reader sees the old timelines or the new

    def _merged(self) -> dict[str, tuple[list[datetime], list[Price]]]:
        timelines = {}
        for model in sorted(self._given.keys() | self._stored.keys()):
            # Stable: at the same instant a stored price comes after, and wins.
            ordered = sorted([*self._given.get(model, ()), *self._stored.get(model, ())], key=lambda p: p.since)
            timelines[model] = ([p.since for p in ordered], ordered)
        return timelines

    @classmethod
    def load(cls, configured: Mapping[str, Sequence[PriceConfig]] | None = None) -> Prices:
        """The packaged table, with every model in `configured` (Settings.prices) replaced by its
        configured price(s)."""
        timelines = packaged()
        for model, entries in (configured or {}).items():
            timelines[model] = [Price.of(entry) for entry in entries]
        return cls(timelines)

    def models(self) -> list[str]:
        """Every model ("vendor/name") with a price."""
        return list(self._timelines)

    def price(self, model: str, at: datetime) -> Price | None:
        """The price of `model` in force at `at` (aware), or None when it has none then."""
        timeline = self._timelines.get(model)
        if timeline is None:
            return Price(_ALWAYS, ZERO) if model.partition("/")[0] in self._free else None
        starts, entries = timeline
        i = bisect.bisect_right(starts, at)
        return entries[i - 1] if i else None

    def cost_nanos(self, model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = 0,
                   at: datetime | None = None, *, cache_write_tokens: int | None = 0,
                   vendor_calls: int = 1) -> int | None:
        """What a request to `model` that started at `at` (default now) cost, in nano-dollars;
        None when the model has no price then. Counts as the ledger keeps them: `prompt_tokens`
        includes `cached_tokens` (read from the vendor's cache) and `cache_write_tokens`;
        `vendor_calls` is how many calls the tokens were spread over (for `long_prompt` tiers)."""
        price = self.price(model, at or datetime.now(UTC))
        if price is None:
            return None
        cached = min(cached_tokens or 0, prompt_tokens)  # a vendor's count is no more than its total
        written = min(cache_write_tokens or 0, prompt_tokens - cached)
        rates = price.rates
        if price.long_above is not None and prompt_tokens > price.long_above * max(vendor_calls, 1):
            rates = price.long_rates or rates
        picos = rates.picos(prompt_tokens - cached - written, cached, written, completion_tokens)
        return (picos + PICOS_PER_NANO // 2) // PICOS_PER_NANO


def usd(nanos: int) -> float:
    """Nano-dollars as a JSON number of dollars (exact to the nano-dollar below ten million dollars:
    a float keeps 15 significant digits)."""
    return nanos / NANOS_PER_USD


def packaged() -> dict[str, list[Price]]:
    """store/prices.toml as timelines per model (aliases share their model's)."""
    table = tomllib.loads((files("gateway.store") / "prices.toml").read_text())
    timelines: dict[str, list[Price]] = {}
    for raw in table.get("price", []):
        try:
            entry = PackagedPrice.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(f"store/prices.toml, {raw.get('model')!r}: {describe(exc)}") from None
        price = Price.of(entry, entry.source)
        for model in (entry.model, *entry.aliases):
            timelines.setdefault(model, []).append(price)
    return timelines


def _instant(since: date | datetime | None) -> datetime:
    if since is None:
        return _ALWAYS
    if not isinstance(since, datetime):
        return datetime(since.year, since.month, since.day, tzinfo=UTC)
    return since.replace(tzinfo=UTC) if since.tzinfo is None else since.astimezone(UTC)
