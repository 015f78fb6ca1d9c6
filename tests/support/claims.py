"""Claims on the limits' counters as their tests make them (tests of limits/counters.py and its
stores): `claim` of a subject's limits at a moment, `acquire` that asks a store and expects no
counter to seed."""

from __future__ import annotations

import itertools

from gateway.limits.counters import BudgetClaim, Charge, Claim, Verdict
from gateway.limits.rules import ACCOUNT, KEY, Limits, Period, Subject
from tests.support.clocks import start_of_today

NOW = start_of_today()  # a day boundary, and the day Redis lives in (tests/support/clocks.py)
KEY_A = Subject(KEY, "key_a")
ACCT = Subject(ACCOUNT, "acct")
_ids = itertools.count()


def claim(*charges: tuple[Subject, Limits], tokens: int = 0, at: float = NOW, seed: int | None = 0,
          reserve: int | None = None) -> Claim:
    return Claim(f"cmpl-{next(_ids)}", tokens, [
        Charge(subject, limits, [BudgetClaim(b, Period.at(b.period, at), tokens if reserve is None else reserve, seed)
                                 for b in limits.budgets]) for subject, limits in charges])


async def acquire(store, c: Claim, now: float = NOW) -> Verdict:
    verdict = await store.acquire(c, now)
    assert not verdict.unseeded
    return verdict
