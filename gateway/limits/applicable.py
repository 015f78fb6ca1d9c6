"""The limits that apply to the requests of one key on one account (`Applicable`), worked out once
per copy of the limits table rather than on every request, and kept per (key, account) pair
(`KnownPairs`): which subjects have limits, which need counters, whether a request's end must be
settled, and the allow-lists' verdicts per model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.limits.counters import settles
from gateway.limits.rules import ACCOUNT, KEY, Limits, Period, Subject, counted_as

MAX_PAIRS = 10_000  # (key, account) pairs whose Applicable is kept; past it they are forgotten and made again
MAX_MODELS = 64  # models whose allow-list verdict an Applicable keeps
_UNKNOWN: Any = object()


@dataclass(slots=True)
class Applicable:
    # The subjects with limits, the key first: each as its counters are named (a rotated key by its
    # lineage, limits/rules.py counted_as), its own limits beside it.
    found: tuple[tuple[Subject, Limits], ...]
    counted: tuple[tuple[Subject, Limits], ...]  # those of them with limits that need counters
    settles: bool  # whether a request's end changes a counter (a second call to the store)
    listed: bool  # whether an allow-list applies
    models: dict[str, Subject | None] = field(default_factory=dict)  # model -> the subject refusing it, or None
    # What the store made of the last claim (Claim.prepared), and its budgets' periods: a claim in
    # the same periods is the same call to the store but for the request's own numbers.
    prepared: tuple[list[Period], object] | None = None

    @classmethod
    def of(cls, table: Mapping[Subject, Limits], key_id: str, account: str) -> Applicable | None:
        found = tuple((counted_as(s, limits), limits) for s in (Subject(KEY, key_id), Subject(ACCOUNT, account))
                      if (limits := table.get(s)) is not None)
        if not found:
            return None
        counted = tuple((s, limits) for s, limits in found if limits.counted)
        return cls(found, counted, any(settles(limits) for _, limits in counted),
                   any(limits.models is not None for _, limits in found))

    @classmethod
    def of_calls(cls, table: Mapping[Subject, Limits], key_id: str) -> Applicable | None:
        """What applies to a call that reaches no model (administration): its key's own request rate
        and concurrency, counted with its other requests. Token limits and budgets count what a
        key spends on models, which such a call does not (and a key past its budget must still be
        able to raise it); its account's limits are for requests on the account's behalf."""
        subject = Subject(KEY, key_id)
        limits = table.get(subject)
        if limits is None or not (limits.rpm or limits.concurrent):
            return None
        calls = ((counted_as(subject, limits), Limits(rpm=limits.rpm, concurrent=limits.concurrent)),)
        return cls(calls, calls, settles(calls[0][1]), False)

    def refusing(self, model: str) -> Subject | None:
        """The subject whose allow-list refuses `model` (the key's first), or None."""
        refusing = self.models.get(model, _UNKNOWN)
        if refusing is _UNKNOWN:
            refusing = next((s for s, limits in self.found if not limits.allows(model)), None)
            if len(self.models) < MAX_MODELS:
                self.models[model] = refusing
        return refusing


class KnownPairs:
    """The (key, account) pairs seen, each with what applies to it, for one copy of the limits table."""

    __slots__ = ("_pairs", "_of")

    def __init__(self) -> None:
        self._pairs: dict[tuple[str, str], Applicable | None] = {}  # (key id, account) -> what applies (None: no limits)
        self._of: Mapping[Subject, Limits] | None = None  # the copy of the table they were worked out from

    def get(self, table: Mapping[Subject, Limits], key_id: str, account: str) -> Applicable | None:
        if self._of is not table:  # the table was read again, and changed
            self._pairs, self._of = {}, table
        applicable = self._pairs.get((key_id, account), _UNKNOWN)
        if applicable is _UNKNOWN:
            if len(self._pairs) >= MAX_PAIRS:
                self._pairs.clear()
            applicable = self._pairs[key_id, account] = Applicable.of(table, key_id, account)
        return applicable
