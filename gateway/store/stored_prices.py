"""Prices an operator sets at run time (PUT /v5/admin/prices, gateway/admin.py), kept in the database
beside the packaged table (store/prices.toml) and the configuration: each stored price is an entry
of its model's timeline from the instant it was set, so it applies to requests that start after
it, and a request that started before keeps the price in force then (as every ledger row does).

Every gateway rereads them with the limits (`limits_cache_seconds`: `StoredPriceReader`), into the
one `Prices` its ledger and limiter price by."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from types import SimpleNamespace
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.store.accounts import AccountsError
from gateway.store.prices import Price, Prices, Rates
from gateway.store.tables import stored_prices

log = logging.getLogger("gateway.prices")

PICOS_PER_USD_PER_MILLION = 10**6  # USD per 1M tokens -> pico-dollars per token
MAX_USD_PER_MILLION = 1_000_000  # beyond any model's price; keeps a request's cost far inside a BIGINT
RATES = ("input", "output", "cached_input")
SOURCE = "stored"


def picos(name: str, usd_per_million: Any) -> int:
    """USD per 1M tokens as pico-dollars per token, the unit costs are computed in, exactly: a price
    with more than six decimals (a part of a pico-dollar per token, which would be rounded away, to
    nothing if it were all of the price) is refused, as the contract says. (A JSON number reaches
    here as the shortest decimal that reads back as it: what the client wrote.)"""
    try:
        value = Decimal(str(usd_per_million))
    except InvalidOperation:
        raise AccountsError(f"{name}: not a number of US dollars", field=name) from None
    if isinstance(usd_per_million, bool) or not value.is_finite() or not 0 <= value <= MAX_USD_PER_MILLION:
        raise AccountsError(f"{name} must be from 0 to {MAX_USD_PER_MILLION:,} US dollars per 1M tokens", field=name)
    rate = value * PICOS_PER_USD_PER_MILLION
    if rate != rate.to_integral_value():
        raise AccountsError(f"{name} {usd_per_million} has more than 6 decimals: prices are kept to the pico-dollar "
                            "per token (0.000001 US dollars per 1M tokens)", field=name)
    return int(rate)


def _price(row: Any) -> Price:
    cached = row.input_picos if row.cached_input_picos is None else row.cached_input_picos
    return Price(row.since, Rates(row.input_picos, row.output_picos, cached, row.input_picos), source=SOURCE)


async def store(connection: AsyncConnection, model: str, usd_per_million: Mapping[str, Any],
                now: datetime | None = None) -> Price:
    """`model`'s price from `now` on."""
    vendor, _, name = model.partition("/")
    if not vendor or not name:
        raise AccountsError(f"model {model!r}: write it vendor/name, as requests do", field="model")
    rates = {name: picos(name, value) for name, value in usd_per_million.items() if value is not None}
    missing = [name for name in ("input", "output") if name not in rates]
    if missing:
        raise AccountsError(f"a price needs {' and '.join(missing)}", field=missing[0])
    row = {"model": model, "since": now or datetime.now(UTC), "input_picos": rates["input"],
           "output_picos": rates["output"], "cached_input_picos": rates.get("cached_input")}
    await connection.execute(insert(stored_prices).values(**row))
    return _price(SimpleNamespace(**row))


async def read(connection: AsyncConnection) -> dict[str, list[Price]]:
    """Every stored price, per model."""
    found: dict[str, list[Price]] = {}
    for row in await connection.execute(select(stored_prices).order_by(stored_prices.c.model, stored_prices.c.since)):
        found.setdefault(row.model, []).append(_price(row))
    return found


def usd_per_million(rate_picos: int) -> float:
    return rate_picos / PICOS_PER_USD_PER_MILLION


class StoredPriceReader:
    """Rereads the stored prices every `ttl` seconds into `prices`; while the database cannot be
    read, the last ones stay in force (and the log says so once)."""

    def __init__(self, engine: AsyncEngine, prices: Prices, ttl: float,
                 sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        self.engine, self.prices, self.ttl, self._sleep = engine, prices, ttl, sleep
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    async def load(self) -> None:
        async with self.engine.connect() as connection:
            self.prices.use_stored(await read(connection))

    def start(self) -> None:
        self._task = asyncio.create_task(self._forever(), name="prices-refresh")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _forever(self) -> None:
        while True:
            await self._sleep(self.ttl)
            try:
                await self.load()
            except Exception as exc:
                if not self._failing:
                    log.warning("cannot reread the stored prices (%s); the last ones stay in force",
                                f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
                self._failing = True
                continue
            self._failing = False
