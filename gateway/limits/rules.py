"""What a limit is: requests and tokens per minute, requests in flight, budgets per UTC day or month,
and a model allow-list of glob patterns, on a key or an account (`Subject`). Both a key's and its
account's limits apply to a request; the tighter one refuses it. And what a change may set of them
(`checked`), the same from the CLI and from the HTTP API.

A budget is generic over its unit (`Unit`): a unit names the ledger column a period's consumption
is summed from, how an operator writes an amount, and what a request may cost before it runs. The
units are tokens and US dollars (counted in nano-dollars, the ledger's `cost_nanos`, priced by
store/prices.py); a unit is one entry of UNITS plus its `budget_<name>` column.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

from gateway.store.accounts import AccountsError
from gateway.store.meter import CACHE_HIT
from gateway.store.prices import NANOS_PER_USD, Prices

KEY, ACCOUNT = "key", "account"
PERIODS = ("day", "month")
RATES = ("rpm", "tpm", "concurrent")


@dataclass(frozen=True, slots=True)
class Unit:
    """What a budget counts. Amounts are whole numbers of the unit's smallest part."""

    name: str  # in the CLI (--budget-<name>), the table (budget_<name>) and the counters' names
    column: str  # the ledger column a request's consumption is read from
    parse: Callable[[str], int]  # an operator's amount, as the CLI takes it
    show: Callable[[int], str]
    # The most a request may consume before it runs: (prices, model, prompt tokens, completion
    # tokens) -> amount; None when it cannot be told (a model without a price, for dollars).
    reserve: Callable[[Prices | None, str, int, int], int | None]
    # Whether a response cache hit counts in it, by what its ledger row says: dollars count what a
    # hit is billed (GATEWAY_CACHE_HIT_PRICE); tokens do not count a hit's (no vendor used them).
    counts_hits: bool = False
    metavar: str = "N"  # how the CLI's help writes an amount
    noun: str = ""  # what an amount is, in the CLI's help (default: the name)
    after: str = ""  # what follows an amount in a message ("30 tokens"; dollars show their sign)

    @property
    def limit_column(self) -> str:
        return f"budget_{self.name}"

    def reserved(self, prices: Prices | None, model: str, prompt: int, completion: int,
                 hit_share: float | None = None) -> int | None:
        """`reserve`, for a cache hit too (`hit_share`: the share of its tokens' price it is billed):
        what it is billed where the unit counts hits, else nothing."""
        amount = self.reserve(prices, model, prompt, completion)
        if amount is None or hit_share is None:
            return amount
        return round(amount * hit_share) if self.counts_hits else 0

    def used(self, row: Mapping[str, Any]) -> int:
        """What a request's ledger row consumed of the unit (a cache hit's, only where hits count)."""
        if row.get("outcome") == CACHE_HIT and not self.counts_hits:
            return 0
        return int(row.get(self.column) or 0)


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


# The largest budget in dollars: Redis counts in its Lua scripts with doubles, exact to 2^53.
MAX_BUDGET_USD = 1_000_000


def _dollars(text: str) -> int:
    """US dollars ("12.50", to the nano-dollar) as nano-dollars, exactly."""
    try:
        value = Decimal(text.strip().removeprefix("$"))
    except InvalidOperation:
        raise ValueError("give dollars, e.g. 25 or 12.50") from None
    if not value.is_finite() or value < 0 or value > MAX_BUDGET_USD:
        raise ValueError(f"must be from 0 to {MAX_BUDGET_USD:,} dollars")
    nanos = value * NANOS_PER_USD
    if nanos != nanos.to_integral_value():
        raise ValueError("dollars have at most 9 decimals (a nano-dollar)")
    return int(nanos)


def _show_dollars(nanos: int) -> str:
    dollars = (Decimal(nanos) / NANOS_PER_USD).quantize(Decimal("0.000000001")).normalize()
    text = f"{dollars:f}"
    whole, _, cents = text.partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


TOKENS = Unit("tokens", "total_tokens", parse=_count, show=str,
              reserve=lambda prices, model, prompt, completion: prompt + completion, after=" tokens")
USD = Unit("usd", "cost_nanos", parse=_dollars, show=_show_dollars,
           reserve=lambda prices, model, prompt, completion: None if prices is None
           else prices.cost_nanos(model, prompt, completion), counts_hits=True,
           metavar="USD", noun="US dollars (e.g. 25 or 12.50), by the gateway's prices,")
UNITS: dict[str, Unit] = {unit.name: unit for unit in (TOKENS, USD)}


@dataclass(frozen=True, slots=True)
class Budget:
    unit: Unit
    limit: int
    period: str  # "day" or "month", UTC calendar

    def period_at(self, now: float) -> Period:
        return Period.at(self.period, now)


@dataclass(frozen=True, slots=True)
class Period:
    name: str  # "day" or "month"
    id: str  # "2026-12-01" or "2026-12": part of the counter's name
    start: datetime
    end: datetime

    @classmethod
    def at(cls, name: str, now: float) -> Period:
        current = _CURRENT.get(name)  # every request asks; the answer changes once a day or a month
        if current is not None and current[0] <= now < current[1]:
            return current[2]
        period = cls._compute(name, now)
        _CURRENT[name] = (period.start.timestamp(), period.end.timestamp(), period)
        return period

    @classmethod
    def _compute(cls, name: str, now: float) -> Period:
        moment = datetime.fromtimestamp(now, UTC)
        if name == "day":
            start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
            end = datetime.fromordinal(start.toordinal() + 1).replace(tzinfo=UTC)
            return cls(name, start.strftime("%Y-%m-%d"), start, end)
        start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
        return cls(name, start.strftime("%Y-%m"), start, end)


_CURRENT: dict[str, tuple[float, float, Period]] = {}


@dataclass(frozen=True, slots=True)
class Limits:
    """One subject's limits; None is no limit of that kind."""

    rpm: int | None = None
    tpm: int | None = None
    concurrent: int | None = None
    budgets: tuple[Budget, ...] = ()
    models: tuple[str, ...] | None = None  # glob patterns ("openai/*"); None allows every model
    # Whether the response cache serves it (gateway/http/cache.py): the key's switch wins over its
    # account's; None says nothing (the cache serves it when the gateway has one).
    cache: bool | None = None
    # A rotated key's: the first key of its rotation chain, whose counters its requests count in,
    # so that a key and its successors have one budget (not a limit: read from the key's row).
    lineage: str | None = None
    # When a key's row says it stops working (revoked, its grace over, or expired; a POSIX time),
    # None for an account or a key without an end: limits of a key that no request can use need
    # no counting (not a limit: read from the key's row).
    ends_at: float | None = None

    @property
    def empty(self) -> bool:
        """Whether it limits nothing (and says nothing of the cache): a subject with no limits."""
        return self.rpm is self.tpm is self.concurrent is self.models is self.cache is None and not self.budgets

    @property
    def counted(self) -> bool:
        """Whether any of it needs counters (the allow-list does not)."""
        return bool(self.rpm or self.tpm or self.concurrent or self.budgets)

    def counted_at(self, now: float) -> bool:
        """Whether it needs counters at `now`: it counts something, and no longer-usable key holds it."""
        return self.counted and (self.ends_at is None or self.ends_at > now)

    def allows(self, model: str) -> bool:
        return self.models is None or any(fnmatch.fnmatchcase(model, pattern) for pattern in self.models)

    def describe(self) -> dict[str, Any]:
        """The limits as the CLI and logs show them."""
        out: dict[str, Any] = {name: getattr(self, name) for name in RATES if getattr(self, name) is not None}
        for budget in self.budgets:
            out[f"budget_{budget.unit.name}"] = budget.unit.show(budget.limit)
            out["period"] = budget.period
        if self.models is not None:
            out["models"] = list(self.models)
        if self.cache is not None:
            out["cache"] = "on" if self.cache else "off"
        return out


class Subject(NamedTuple):  # a tuple: hashed and compared in C, on every request
    kind: str  # KEY or ACCOUNT
    id: str

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"


def counted_as(subject: Subject, found: Limits) -> Subject:
    """The subject whose counters `subject`'s requests count in: a rotated key's lineage, else itself."""
    return Subject(KEY, found.lineage) if found.lineage is not None and subject.kind == KEY else subject


# -- what a change may set ----------------------------------------------------------------------
# The largest count or amount a limit takes (requests, tokens, nano-dollars): Redis counts in its Lua
# scripts with doubles, exact below 2^53, and the counters' arithmetic must stay exact to the unit
# (a TPM of 2^63 read back as a bucket fuller than its limit: "used -1"). The same bound as
# MAX_BUDGET_USD in nano-dollars.
MAX_AMOUNT = 10**15
# What a change may set or clear: the limits table's columns (budget_period is `period` over HTTP).
FIELDS = (*RATES, *(unit.limit_column for unit in UNITS.values()), "budget_period", "models", "cache")


def check_pattern(pattern: str) -> str:
    """A model pattern of an allow-list: one that can match a "vendor/name" (an empty one, or one
    naming no vendor, would set a list that refuses every model)."""
    pattern = pattern.strip()
    if not pattern:
        raise AccountsError("an empty pattern matches no model (to lift the allow-list, clear `models`)",
                            field="models")
    if "/" not in pattern and not any(c in pattern for c in "*?["):
        raise AccountsError(f"{pattern!r} matches no model: models are written vendor/name "
                            "(e.g. openai/* or local/smollm2-135m)", field="models")
    return pattern


def checked(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` (FIELDS; a None clears one), each checked: counts from 1 (budgets from 0) to
    MAX_AMOUNT, a known period, patterns that can match a model."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in FIELDS:
            raise AccountsError(f"unknown limit {name!r}: choose from {', '.join(FIELDS)}", field=name)
        if value is None:
            out[name] = None
        elif name == "models":
            out[name] = [check_pattern(p) for p in value]
        elif name == "cache":  # the response cache's switch (docs/cache.md)
            if not isinstance(value, bool):
                raise AccountsError("cache is on or off: true or false", field="cache")
            out[name] = value
        elif name == "budget_period":
            if value not in PERIODS:
                raise AccountsError(f"period {value!r}: choose from {', '.join(PERIODS)}", field="period")
            out[name] = value
        else:
            least = 0 if name.startswith("budget_") else 1
            count = whole(value)
            if count is None or not least <= count <= MAX_AMOUNT:
                raise AccountsError(f"{name} must be a whole number from {least} to {MAX_AMOUNT:,}", field=name)
            out[name] = count
    return out


def whole(value: Any) -> int | None:
    """`value` as an int if it is a whole number (JSON's 5.0 too), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) else None
