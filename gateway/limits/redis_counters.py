"""The counters of limits/counters.py in Redis, shared exactly by every worker and host: a
claim is checked and taken by one Lua script (one round trip, atomic), and settled by another.

Per subject (a key or an account; `<p>` is `redis_prefix` + "key:<id>" or "account:<id>"):
    <p>:rate            hash  rl, rt (requests bucket level, at) and tl, tt (tokens bucket)
    <p>:leases          zset  request id -> lease expiry; the requests in flight
    <p>:held            hash  request id -> what it reserved of each budget ("counter key\\namount\\n"...)
    <p>:budget:<unit>:<period>  hash  used, reserved
A lease not renewed (`renew`, by the process that holds it) expires: its slot and its budget
reservations are released by the next claim on that subject, so a process that died frees them.
Buckets expire once full again (a missing bucket is a full one); budget counters after their
period. The time is Redis's own (TIME, in the scripts), and so is every lease's and period's: how
the scripts stay right under stalls, restarts and clock skew is limits/redis_scripts.py.
The keys of one claim must live on one Redis (not a Redis Cluster: a key's and its account's
counters share no hash slot).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass

from gateway.core.ids import ids
from gateway.limits.counters import (
    RPM,
    TPM,
    Charge,
    Claim,
    Reading,
    Refusal,
    Settled,
    Verdict,
    choose,
    refill,
    window,
)
from gateway.limits.redis_scripts import ACQUIRE, LEASE_SECONDS, SETTLE, header
from gateway.limits.rules import Limits, Subject
from gateway.store.resp import Redis, Script, bulk

__all__ = ["LEASE_SECONDS", "RedisCounters"]
CONNECT_TIMEOUT = 1.0  # seconds; a request must not wait long for a store that is away
COMMAND_TIMEOUT = 1.0
RECENT_SECONDS = 60  # how long a seed's rows wait for the claim that reads them


def _request(request_id: str, numbers: str) -> bytes:
    """A call's own two arguments: the request's id, and its numbers (digits, signs and spaces)."""
    if request_id.isascii():  # (always, for the gateway's ids) one string written, one encoded
        return f"${len(request_id)}\r\n{request_id}\r\n${len(numbers)}\r\n{numbers}\r\n".encode()
    return bulk(request_id) + bulk(numbers)


MAX_WIRES = 10_000  # subjects (and sets of them) whose calls are kept encoded; past it, forgotten and made again


@dataclass(slots=True, eq=False)
class _Wire:
    """A subject's part of the scripts' calls, in RESP, kept while its limits and periods stay."""

    limits: Limits
    periods: list[str]  # the ids of its budgets' periods
    keys: list[str]  # rate, leases, held, then one counter per budget
    acquire: bytes  # rpm, tpm, concurrent, number of budgets, then per budget limit, start and end
    settle: bytes  # tpm, number of budgets


@dataclass(slots=True)
class _Calls:
    """The two scripts' calls for one set of subjects, all but the request's own arguments (its id
    and its numbers) written once: the head (the command, the keys) and the tail."""

    acquire_head: bytes
    acquire_tail: bytes
    settle_head: bytes
    settle_tail: bytes


class RedisCounters:
    remote = True

    def __init__(self, url: str, prefix: str, *, callers_clock: bool = False, timeout: float = COMMAND_TIMEOUT) -> None:
        """`callers_clock`: the scripts take `now` from the caller instead of Redis (tests of the
        counting that move the time; never a gateway's, whose hosts' clocks may differ). `timeout`:
        how long a command waits for Redis (a test of a stall sets its own)."""
        # No retry, no backoff: a request must not wait for a store that is away (the limiter's
        # policy applies instead, and it tries again shortly).
        self.client = Redis(url, connect_timeout=CONNECT_TIMEOUT, timeout=timeout)
        self._prefix = prefix
        self._callers_clock = callers_clock
        self._offset: float | None = None  # Redis's clock less this process's monotonic clock, as last heard
        self._acquire = Script(self.client, header(ACQUIRE, prefix))
        self._settle = Script(self.client, header(SETTLE, prefix))
        self._wires: dict[Subject, _Wire] = {}
        self._calls: dict[tuple[_Wire, ...], _Calls] = {}

    def base(self, subject: Subject) -> str:
        return f"{self._prefix}{subject.kind}:{subject.id}"

    def _calls_of(self, claim: Claim) -> _Calls:
        calls = claim.prepared
        if calls.__class__ is _Calls:
            return calls  # type: ignore[return-value]
        calls = claim.prepared = self._encoded(claim)
        return calls

    def _encoded(self, claim: Claim) -> _Calls:
        wires = tuple(map(self._wire, claim.charges))
        calls = self._calls.get(wires)
        if calls is None:
            if len(self._calls) >= MAX_WIRES:
                self._calls.clear()
            keys = [bulk(sum(len(w.keys) for w in wires)), *(bulk(key) for w in wires for key in w.keys)]
            head, subjects = b"".join(keys), bulk(len(wires))
            count = len(keys) + 3  # the id, the numbers and the number of subjects, then the subjects'
            calls = self._calls[wires] = _Calls(
                self._acquire.head(count + sum(4 + 3 * len(w.periods) for w in wires)) + head,
                subjects + b"".join(w.acquire for w in wires),
                self._settle.head(count + 2 * len(wires)) + head,
                subjects + b"".join(w.settle for w in wires))
        return calls

    def _wire(self, charge: Charge) -> _Wire:
        wire = self._wires.get(charge.subject)
        if wire is not None and wire.limits is charge.limits and [b.period.id for b in charge.budgets] == wire.periods:
            return wire
        base, lim = self.base(charge.subject), charge.limits
        wire = _Wire(lim, [b.period.id for b in charge.budgets],
                     [f"{base}:rate", f"{base}:leases", f"{base}:held",
                      *(f"{base}:budget:{b.counter}" for b in charge.budgets)],
                     b"".join(map(bulk, (lim.rpm or "", lim.tpm or "", lim.concurrent or "", len(charge.budgets),
                                         *(x for b in charge.budgets for x in (
                                             b.budget.limit, b.period.start.timestamp(), b.period.end.timestamp()))))),
                     bulk(lim.tpm or "") + bulk(len(charge.budgets)))
        if len(self._wires) >= MAX_WIRES:
            self._wires.clear()
        self._wires[charge.subject] = wire
        return wire

    def time(self, now: float) -> float:
        """Redis's clock now, as last heard (the caller's `now` until Redis has answered once)."""
        if self._callers_clock or self._offset is None:
            return now
        return time.monotonic() + self._offset

    def _heard(self, redis_now: str) -> None:
        # Heard after Redis read its clock: the offset errs low by up to a round trip, so a
        # deadline made from it is early, never late.
        if not self._callers_clock:
            self._offset = float(redis_now) - time.monotonic()

    def _moment(self, now: float) -> str:
        return f"{round(now * 1e6)}" if self._callers_clock else "-"

    def acquire(self, claim: Claim, now: float) -> Awaitable[Verdict]:
        """Written to Redis now (when connected): the verdict is awaited later (Counters.acquire).
        Redis runs it only before its deadline by Redis's clock, the soonest this process may
        give up on it: a claim this process has given up on is never taken behind its back. A
        process that has not heard Redis's clock yet asks for it first."""
        if self._offset is None and not self._callers_clock:
            return self._acquire_once_heard(claim, now)
        if any(b.recent for charge in claim.charges for b in charge.budgets):
            return self._acquire_seeding(claim, now)  # a counter's seed (rare)
        calls = self._calls_of(claim)
        deadline = "-"
        if not self._callers_clock:
            deadline = f"{round((time.monotonic() + self._offset + self.client.abandons_after) * 1e6)}"
        numbers = f"{self._moment(now)} {claim.tokens} {deadline}"
        for charge in claim.charges:
            for b in charge.budgets:
                numbers += (f" {b.reserve} {'-' if b.seed is None else b.seed}"
                            f" {'-' if b.seeded is None else round(b.seeded * 1e6)} {b.recent_tag or '-'}")
        return self._verdict(claim, self._acquire.ask(calls.acquire_head + _request(claim.request_id, numbers)
                                                      + calls.acquire_tail))

    async def _acquire_seeding(self, claim: Claim, now: float) -> Verdict:
        await self.write_recent(claim)
        return await self.acquire(claim, now)

    async def write_recent(self, claim: Claim) -> None:
        """The rows a seed is told by id, each budget's in a hash of this claim's own (its
        `recent_tag`, named in the claim's numbers), which the claim's script reads and removes:
        processes seeding one counter at once (every worker, once Redis is back empty) never
        read or remove each other's. Unread (the claim refused before it), a hash lasts a minute."""
        writes = []
        for charge in claim.charges:
            for b in charge.budgets:
                if b.recent:
                    b.recent_tag = ids.next()
                    key = f"{self.base(charge.subject)}:budget:{b.counter}:recent:{b.recent_tag}"
                    writes += [self.client.call("HSET", key, *(x for row in b.recent.items() for x in row)),
                               self.client.call("EXPIRE", key, RECENT_SECONDS)]
                    b.recent = {}
        await asyncio.gather(*writes)  # written in this order, on one connection: one round trip

    async def _acquire_once_heard(self, claim: Claim, now: float) -> Verdict:
        await self.ping()
        return await self.acquire(claim, now)

    async def _verdict(self, claim: Claim, asked: Awaitable[str]) -> Verdict:
        fields = (await asked).split(" ")
        self._heard(fields[1])
        if fields[0] == "seed":
            budgets = [b for charge in claim.charges for b in charge.budgets]
            return Verdict(unseeded=[budgets[int(i) - 1] for i in fields[2:]])
        if fields[0] == "clock":  # the claim's periods are not Redis's: asked again in Redis's
            return Verdict(clock=float(fields[1]))
        if fields[0] == "late":
            raise LateClaim("Redis ran the claim after its deadline (a stall past the command timeout)")
        verdict = Verdict()
        windows, at = verdict.windows, 2
        for charge in claim.charges:
            requests, tokens = fields[at], fields[at + 1]
            if requests:
                windows[charge.subject, RPM] = window(charge.limits.rpm, float(requests))
            if tokens:
                windows[charge.subject, TPM] = window(charge.limits.tpm, float(tokens))
            at += 2
        if fields[0] == "refused":
            verdict.refusal = choose([self._refusal(claim, fields[i:i + 8]) for i in range(at, len(fields), 8)])
        return verdict

    @staticmethod
    def _refusal(claim: Claim, fields: list[str]) -> Refusal:
        s, kind, limit, wait, used, reserved, wanted, budget = fields
        unit = ""
        if int(budget):
            unit = [b for charge in claim.charges for b in charge.budgets][int(budget) - 1].budget.unit.name
        return Refusal(claim.charges[int(s) - 1].subject, kind, int(limit), None if float(wait) < 0 else float(wait),
                       int(float(used)), int(float(reserved)), int(float(wanted)), unit)

    def settle(self, claim: Claim, tokens: int, spent: Mapping[str, int], now: float, done: Settled) -> None:
        """Written to Redis now (no task, no waiting); `done` hears when Redis has it. Applied once
        however often it is sent (its id is the request's)."""
        calls = self._calls_of(claim)
        ended = "-" if claim.ended is None else f"{round(claim.ended * 1e6)}"
        numbers = f"{self._moment(now)} {claim.tokens} {tokens} {ended}"
        for charge in claim.charges:
            for b in charge.budgets:
                numbers += f" {b.reserve} {spent.get(b.counter, 0)}"
        self._settle.start(calls.settle_head + _request(claim.request_id, numbers) + calls.settle_tail, done)

    async def renew(self, claims: Iterable[Claim], now: float) -> None:
        until = repr(self.time(now) + LEASE_SECONDS)
        await asyncio.gather(*(self.client.call("ZADD", f"{self.base(charge.subject)}:leases", "XX", until,
                                                claim.request_id)
                               for claim in claims for charge in claim.charges if charge.settles))

    async def read(self, subject: Subject, limits: Limits, now: float) -> Reading:
        now = self.time(now)
        base = self.base(subject)
        names = [f"{b.unit.name}:{b.period_at(now).id}" for b in limits.budgets]
        rate, in_flight, *budgets = await asyncio.gather(
            self.client.call("HMGET", f"{base}:rate", "rl", "rt", "tl", "tt"),
            self.client.call("ZCOUNT", f"{base}:leases", repr(now), "+inf"),
            *(self.client.call("HMGET", f"{base}:budget:{name}", "used", "reserved") for name in names))
        def bucket(limit: int | None, level: str | None, at: str | None):
            if not limit:
                return None
            return window(limit, limit if level is None else refill(float(level), float(at), now, limit))

        return Reading(requests=bucket(limits.rpm, rate[0], rate[1]), tokens=bucket(limits.tpm, rate[2], rate[3]),
                       in_flight=in_flight,
                       budgets={name: (int(v[0]), int(v[1])) for name, v in zip(names, budgets) if v[0] is not None})

    async def ping(self) -> None:
        self._heard(_seconds(await self.client.call("TIME")))

    async def close(self) -> None:
        await self.client.close()


class LateClaim(Exception):
    """Redis refused a claim whose deadline had passed: the limiter's policy applies, as for a timeout."""


def _seconds(reply: list) -> str:
    """Redis's TIME reply as seconds."""
    return f"{int(reply[0])}.{int(reply[1]):06d}"
