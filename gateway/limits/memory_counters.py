"""The counters of limits/counters.py in this process's memory (`MemoryCounters`): exact for one
process, with the semantics of the shared store (limits/redis_counters.py) and tested alike."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.limits.counters import (
    BUDGET,
    BUDGET_IN_FLIGHT,
    CONCURRENT,
    REFILL_SECONDS,
    RETRY_IN_FLIGHT,
    RPM,
    TOO_LARGE,
    TPM,
    Claim,
    Reading,
    Refusal,
    Settled,
    Verdict,
    choose,
    refill,
    window,
)
from gateway.limits.rules import Limits, Subject


class MemoryCounters:
    """Counters in this process's memory: exact for one process (gateway/store/limiter.py refuses
    them for several workers). Leases never expire: their holder is this process."""

    remote = False

    def __init__(self) -> None:
        self._buckets: dict[tuple[Subject, str], tuple[float, float]] = {}  # -> (level, at)
        self._leases: dict[Subject, set[str]] = {}
        self._budgets: dict[tuple[Subject, str], list[int]] = {}  # -> [used, reserved]

    def _level(self, subject: Subject, kind: str, limit: int, now: float) -> float:
        bucket = self._buckets.get((subject, kind))
        return float(limit) if bucket is None else refill(bucket[0], bucket[1], now, limit)

    async def acquire(self, claim: Claim, now: float) -> Verdict:
        verdict = Verdict()
        refusals: list[Refusal] = []
        levels: list[tuple[Subject, str, float, int, int]] = []  # (subject, RPM|TPM, level, limit, taken)
        tokens = claim.tokens
        for charge in claim.charges:
            s, lim = charge.subject, charge.limits
            if lim.rpm:
                level = self._level(s, RPM, lim.rpm, now)
                levels.append((s, RPM, level, lim.rpm, 1))
                if level < 1:
                    refusals.append(Refusal(s, RPM, lim.rpm, (1 - level) * REFILL_SECONDS / lim.rpm, wanted=1))
            if lim.tpm:
                level = self._level(s, TPM, lim.tpm, now)
                levels.append((s, TPM, level, lim.tpm, tokens))
                if tokens > lim.tpm:
                    refusals.append(Refusal(s, TOO_LARGE, lim.tpm, wanted=tokens))
                elif level < tokens:
                    refusals.append(Refusal(s, TPM, lim.tpm, (tokens - level) * REFILL_SECONDS / lim.tpm,
                                            wanted=tokens))
            if lim.concurrent and len(self._leases.get(s, ())) >= lim.concurrent:
                refusals.append(Refusal(s, CONCURRENT, lim.concurrent, RETRY_IN_FLIGHT, wanted=1))
            for b in charge.budgets:
                name = b.counter
                counter = self._budgets.get((s, name))
                if counter is None:
                    if b.seed is None:
                        verdict.unseeded.append(b)
                        continue
                    # (this process settles nothing of a counter before its seed)
                    counter = self._budgets[s, name] = [b.seed + sum(b.recent.values()), 0]
                used, reserved = counter
                if used + b.reserve > b.budget.limit:
                    refusals.append(Refusal(s, BUDGET, b.budget.limit, used=used, reserved=reserved, wanted=b.reserve,
                                            unit=b.budget.unit.name))
                elif used + reserved + b.reserve > b.budget.limit:
                    refusals.append(Refusal(s, BUDGET_IN_FLIGHT, b.budget.limit, RETRY_IN_FLIGHT, used=used,
                                            reserved=reserved, wanted=b.reserve, unit=b.budget.unit.name))
        if verdict.unseeded:
            return verdict
        refusal = verdict.refusal = choose(refusals)
        windows = verdict.windows
        for s, kind, level, limit, taken in levels:
            if refusal is None:
                level -= taken
                self._buckets[s, kind] = (level, now)
            windows[s, kind] = window(limit, level)
        if refusal is None:
            for charge in claim.charges:
                if charge.leased:
                    leases = self._leases.get(charge.subject)
                    if leases is None:
                        leases = self._leases[charge.subject] = set()
                    leases.add(claim.request_id)
                for b in charge.budgets:
                    self._budgets[charge.subject, b.counter][1] += b.reserve
        return verdict

    def settle(self, claim: Claim, tokens: int, spent: Mapping[str, int], now: float, done: Settled) -> None:
        for charge in claim.charges:
            s, lim = charge.subject, charge.limits
            if lim.tpm:
                level = self._level(s, TPM, lim.tpm, now) + claim.tokens - tokens
                self._buckets[s, TPM] = (min(level, float(lim.tpm)), now)
            if (leases := self._leases.get(s)) is not None:
                leases.discard(claim.request_id)
            for b in charge.budgets:
                name = b.counter
                counter = self._budgets.get((s, name))
                if counter is not None:
                    counter[0] += spent.get(name, 0)
                    counter[1] -= b.reserve
        done(None)

    async def renew(self, claims: Iterable[Claim], now: float) -> None:
        return None  # leases here end only with settlement (or with this process)

    def time(self, now: float) -> float:
        return now  # one process: its clock is the store's

    async def read(self, subject: Subject, limits: Limits, now: float) -> Reading:
        budgets = {}
        for budget in limits.budgets:
            name = f"{budget.unit.name}:{budget.period_at(now).id}"
            if (counter := self._budgets.get((subject, name))) is not None:
                budgets[name] = (counter[0], counter[1])
        return Reading(
            requests=window(limits.rpm, self._level(subject, RPM, limits.rpm, now)) if limits.rpm else None,
            tokens=window(limits.tpm, self._level(subject, TPM, limits.tpm, now)) if limits.tpm else None,
            in_flight=len(self._leases.get(subject, ())),
            budgets=budgets,
        )

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None
