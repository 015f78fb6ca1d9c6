"""The counters of gateway/store/counters.py in Redis, shared exactly by every worker and host: a
claim is checked and taken by one Lua script (one round trip, atomic), and settled by another.

Per subject (a key or an account; `<p>` is `redis_prefix` + "key:<id>" or "account:<id>"):
    <p>:rate            hash  rl, rt (requests bucket level, at) and tl, tt (tokens bucket)
    <p>:leases          zset  request id -> lease expiry; the requests in flight
    <p>:held            hash  request id -> what it reserved of each budget ("counter key\\namount\\n"...)
    <p>:budget:<unit>:<period>  hash  used, reserved
A lease not renewed (`renew`, by the process that holds it) expires: its slot and its budget
reservations are released by the next claim on that subject, so a process that died frees them.
Buckets expire once full again (a missing bucket is a full one); budget counters after their
period. The time is an argument, the caller's clock. The keys of one claim must live on one Redis
(not a Redis Cluster: a key's and its account's counters share no hash slot).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass

from gateway.store.counters import (
    REFILL_SECONDS,
    RETRY_IN_FLIGHT,
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
from gateway.store.limits import Limits, Subject
from gateway.store.resp import Redis, Script, bulk

LEASE_SECONDS = 60.0  # a lease not renewed for this long is a dead process's (renewed every third of it)
CONNECT_TIMEOUT = 1.0  # seconds; a request must not wait long for a store that is away
COMMAND_TIMEOUT = 1.0

_COMMON = """
-- integers go to Redis as digits: Lua would write 1e+15, or -0, which HINCRBY refuses
local function int(x) return string.format('%d', x) end
local function num(x) return string.format('%.17g', x) end
-- a bucket's level at `now` from its stored level and time (none stored: a full bucket)
local function refilled(l, t, cap, now)
  l, t = tonumber(l), tonumber(t)
  if l == nil then return cap end
  l = l + math.max(now - t, 0) * cap / REFILL
  if l > cap then l = cap end
  return l
end
local function level(key, lf, tf, cap, now)
  local v = redis.call('HMGET', key, lf, tf)
  return refilled(v[1], v[2], cap, now)
end
-- the arguments that change with every request come as one string of numbers: one to write, not many
local function numbers(text)
  local v = {}
  for x in string.gmatch(text, '%S+') do v[#v + 1] = x end
  return v
end
local function expire_full(key, now, levels)
  -- a bucket back at its limit is the same as no bucket: let it go then
  local ms = 1000
  for _, p in ipairs(levels) do ms = math.max(ms, math.ceil((p[2] - p[1]) * REFILL * 1000 / p[2]) + 1000) end
  redis.call('PEXPIRE', key, ms)
end
"""

# KEYS: per subject rate, leases, held, then one counter per budget.
# ARGV: request id; what changes with every request, as one string of numbers (see `numbers`): now
#       (epoch microseconds), tokens, then per budget reserve and seed ("-" when unknown); subjects;
#       per subject rpm, tpm, concurrent, budgets, and per budget limit, expiry (epoch seconds).
ACQUIRE = _COMMON + """
local v = numbers(ARGV[2])
local id, now, E, S = ARGV[1], tonumber(v[1]) / 1e6, tonumber(v[2]), tonumber(ARGV[3])
local lease = now + LEASE
local a, k, vi, subjects, unseeded, refusals = 4, 1, 3, {}, {}, {}
local bi = 0
for s = 1, S do
  local sub = {rate = KEYS[k], leases = KEYS[k + 1], held = KEYS[k + 2], rpm = tonumber(ARGV[a]),
               tpm = tonumber(ARGV[a + 1]), conc = tonumber(ARGV[a + 2]), budgets = {}}
  local nb = tonumber(ARGV[a + 3])
  k, a = k + 3, a + 4
  for b = 1, nb do
    bi = bi + 1
    sub.budgets[b] = {key = KEYS[k], limit = tonumber(ARGV[a]), reserve = tonumber(v[vi]),
                      seed = tonumber(v[vi + 1]), expire = tonumber(ARGV[a + 1]), index = bi}
    k, a, vi = k + 1, a + 2, vi + 2
  end
  subjects[s] = sub
end
local function refuse(s, kind, limit, wait, used, reserved, wanted, budget)
  refusals[#refusals + 1] = {s, kind, limit, wait, used, reserved, wanted, budget or 0}
end
for s, sub in ipairs(subjects) do
  if sub.conc or #sub.budgets > 0 then
    -- leases nobody renewed: their holder died; release what they held
    local expired = redis.call('ZRANGEBYSCORE', sub.leases, '-inf', now)
    for _, rid in ipairs(expired) do
      local held = redis.call('HGET', sub.held, rid)
      if held then
        for bkey, amount in string.gmatch(held, '([^\\n]+)\\n([^\\n]+)\\n') do
          if redis.call('EXISTS', bkey) == 1 then redis.call('HINCRBY', bkey, 'reserved', int(-tonumber(amount))) end
        end
        redis.call('HDEL', sub.held, rid)
      end
    end
    if #expired > 0 then redis.call('ZREMRANGEBYSCORE', sub.leases, '-inf', now) end
  end
  if sub.rpm or sub.tpm then  -- both buckets in one read
    local v = redis.call('HMGET', sub.rate, 'rl', 'rt', 'tl', 'tt')
    if sub.rpm then sub.rl = refilled(v[1], v[2], sub.rpm, now) end
    if sub.tpm then sub.tl = refilled(v[3], v[4], sub.tpm, now) end
  end
  if sub.rpm then
    if sub.rl < 1 then refuse(s, 'rpm', sub.rpm, (1 - sub.rl) * REFILL / sub.rpm, 0, 0, 1) end
  end
  if sub.tpm then
    if E > sub.tpm then refuse(s, 'tpm_too_large', sub.tpm, -1, 0, 0, E)
    elseif sub.tl < E then refuse(s, 'tpm', sub.tpm, (E - sub.tl) * REFILL / sub.tpm, 0, 0, E) end
  end
  if sub.conc and redis.call('ZCARD', sub.leases) >= sub.conc then refuse(s, 'concurrent', sub.conc, RETRY, 0, 0, 1) end
  for _, b in ipairs(sub.budgets) do
    -- a counter is written whole (used and reserved) when it is seeded: no `used`, no counter
    local v = redis.call('HMGET', b.key, 'used', 'reserved')
    local used, reserved = tonumber(v[1]), tonumber(v[2])
    if used == nil then
      if b.seed == nil then unseeded[#unseeded + 1] = tostring(b.index) else
        redis.call('HSET', b.key, 'used', int(b.seed), 'reserved', 0)
        redis.call('PEXPIREAT', b.key, math.ceil(b.expire * 1000))
        used, reserved = b.seed, 0
      end
    end
    if used ~= nil then
      if used + b.reserve > b.limit then refuse(s, 'budget', b.limit, -1, used, reserved, b.reserve, b.index)
      elseif used + reserved + b.reserve > b.limit then
        refuse(s, 'budget_in_flight', b.limit, RETRY, used, reserved, b.reserve, b.index)
      end
    end
  end
end
if #unseeded > 0 then return 'seed ' .. table.concat(unseeded, ' ') end
-- the reply is one string, its fields separated by spaces: the verdict, each subject's bucket
-- levels after it ('' for no such limit), then each refusal's 8 fields
local out = {'ok'}
if #refusals > 0 then out[1] = 'refused' end
local nowtext = num(now)
for s, sub in ipairs(subjects) do
  local taken = #refusals == 0
  local rl, tl = sub.rl, sub.tl
  if taken then
    if rl then rl = rl - 1 end
    if tl then tl = tl - E end
    if rl and tl then redis.call('HSET', sub.rate, 'rl', num(rl), 'rt', nowtext, 'tl', num(tl), 'tt', nowtext)
    elseif rl then redis.call('HSET', sub.rate, 'rl', num(rl), 'rt', nowtext)
    elseif tl then redis.call('HSET', sub.rate, 'tl', num(tl), 'tt', nowtext) end
    if rl or tl then
      local levels = {}
      if rl then levels[#levels + 1] = {rl, sub.rpm} end
      if tl then levels[#levels + 1] = {tl, sub.tpm} end
      expire_full(sub.rate, now, levels)
    end
    if sub.conc or #sub.budgets > 0 then
      redis.call('ZADD', sub.leases, lease, id)
      redis.call('PEXPIRE', sub.leases, math.ceil((lease - now) * 1000) + 60000)
      local held = ''
      for _, b in ipairs(sub.budgets) do
        redis.call('HINCRBY', b.key, 'reserved', int(b.reserve))
        held = held .. b.key .. '\\n' .. int(b.reserve) .. '\\n'
      end
      if held ~= '' then
        redis.call('HSET', sub.held, id, held)
        redis.call('PEXPIRE', sub.held, math.ceil((lease - now) * 1000) + 60000)
      end
    end
  end
  out[#out + 1] = rl and num(rl) or ''
  out[#out + 1] = tl and num(tl) or ''
end
for _, r in ipairs(refusals) do
  for i = 1, 8 do out[#out + 1] = type(r[i]) == 'number' and num(r[i]) or r[i] end
end
return table.concat(out, ' ')
"""

# KEYS: as ACQUIRE. ARGV: request id; one string of numbers: now (epoch microseconds), reserved
# tokens, used tokens, then per budget reserve, spent; subjects; per subject tpm, budgets.
SETTLE = _COMMON + """
local v = numbers(ARGV[2])
local id, now, E, T, S = ARGV[1], tonumber(v[1]) / 1e6, tonumber(v[2]), tonumber(v[3]), tonumber(ARGV[3])
local a, k, vi = 4, 1, 4
for s = 1, S do
  local rate, leases, held = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  local tpm, nb = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  k, a = k + 3, a + 2
  if tpm then
    local tl = level(rate, 'tl', 'tt', tpm, now) + E - T
    if tl > tpm then tl = tpm end
    redis.call('HSET', rate, 'tl', num(tl), 'tt', num(now))
    -- kept until the tokens bucket is full again, and no shorter than the requests bucket needs
    redis.call('PEXPIRE', rate, math.max(redis.call('PTTL', rate), math.ceil((tpm - tl) * REFILL * 1000 / tpm) + 1000))
  end
  redis.call('ZREM', leases, id)
  -- a lease already swept (its holder was thought dead) released its reservation then
  local mine = redis.call('HDEL', held, id) == 1
  for b = 1, nb do
    local key, reserve, spent = KEYS[k], tonumber(v[vi]), tonumber(v[vi + 1])
    k, vi = k + 1, vi + 2
    if redis.call('EXISTS', key) == 1 then
      redis.call('HINCRBY', key, 'used', int(spent))
      if mine then redis.call('HINCRBY', key, 'reserved', int(-reserve)) end
    end
  end
end
return 1
"""


def _request(request_id: str, numbers: str) -> bytes:
    """A call's own two arguments: the request's id, and its numbers (digits, signs and spaces)."""
    if request_id.isascii():  # (always, for the gateway's ids) one string written, one encoded
        return f"${len(request_id)}\r\n{request_id}\r\n${len(numbers)}\r\n{numbers}\r\n".encode()
    return bulk(request_id) + bulk(numbers)


def _header(script: str) -> str:
    return f"local REFILL, RETRY, LEASE = {REFILL_SECONDS!r}, {RETRY_IN_FLIGHT!r}, {LEASE_SECONDS!r}\n" + script


MAX_WIRES = 10_000  # subjects (and sets of them) whose calls are kept encoded; past it, forgotten and made again


@dataclass(slots=True, eq=False)
class _Wire:
    """A subject's part of the scripts' calls, in RESP, kept while its limits and periods stay."""

    limits: Limits
    periods: list[str]  # the ids of its budgets' periods
    keys: list[str]  # rate, leases, held, then one counter per budget
    acquire: bytes  # rpm, tpm, concurrent, number of budgets, then per budget limit and expiry
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

    def __init__(self, url: str, prefix: str) -> None:
        # No retry, no backoff: a request must not wait for a store that is away (the limiter's
        # policy applies instead, and it tries again shortly).
        self.client = Redis(url, connect_timeout=CONNECT_TIMEOUT, timeout=COMMAND_TIMEOUT)
        self._prefix = prefix
        self._acquire = Script(self.client, _header(ACQUIRE))
        self._settle = Script(self.client, _header(SETTLE))
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
                self._acquire.head(count + sum(4 + 2 * len(w.periods) for w in wires)) + head,
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
                                         *(x for b in charge.budgets
                                           for x in (b.budget.limit, b.period.end.timestamp()))))),
                     bulk(lim.tpm or "") + bulk(len(charge.budgets)))
        if len(self._wires) >= MAX_WIRES:
            self._wires.clear()
        self._wires[charge.subject] = wire
        return wire

    def acquire(self, claim: Claim, now: float) -> Awaitable[Verdict]:
        """Written to Redis now (when connected): the verdict is awaited later (Counters.acquire)."""
        calls = self._calls_of(claim)
        numbers = f"{round(now * 1e6)} {claim.tokens}"
        for charge in claim.charges:
            for b in charge.budgets:
                numbers += f" {b.reserve} {'-' if b.seed is None else b.seed}"
        return self._verdict(claim, self._acquire.ask(calls.acquire_head + _request(claim.request_id, numbers)
                                                      + calls.acquire_tail))

    async def _verdict(self, claim: Claim, asked: Awaitable[str]) -> Verdict:
        fields = (await asked).split(" ")
        if fields[0] == "seed":
            budgets = [b for charge in claim.charges for b in charge.budgets]
            return Verdict(unseeded=[budgets[int(i) - 1] for i in fields[1:]])
        verdict = Verdict()
        windows, at = verdict.windows, 1
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
        """Written to Redis now (no task, no waiting); `done` hears when Redis has it."""
        calls = self._calls_of(claim)
        numbers = f"{round(now * 1e6)} {claim.tokens} {tokens}"
        for charge in claim.charges:
            for b in charge.budgets:
                numbers += f" {b.reserve} {spent.get(b.counter, 0)}"
        self._settle.start(calls.settle_head + _request(claim.request_id, numbers) + calls.settle_tail, done)

    async def renew(self, claims: Iterable[Claim], now: float) -> None:
        until = repr(now + LEASE_SECONDS)
        await asyncio.gather(*(self.client.call("ZADD", f"{self.base(charge.subject)}:leases", "XX", until,
                                                claim.request_id)
                               for claim in claims for charge in claim.charges if charge.leased))

    async def read(self, subject: Subject, limits: Limits, now: float) -> Reading:
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
        await self.client.call("PING")

    async def close(self) -> None:
        await self.client.close()
