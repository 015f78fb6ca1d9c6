"""The Lua scripts of limits/redis_counters.py: a claim checked and taken (ACQUIRE) and a
request's end settled (SETTLE), each atomic, in one round trip.

Made safe against what a shared store does to its callers:
- Time is Redis's own (`TIME`), never the caller's: hosts whose clocks differ count the same
  buckets, leases and periods. A claim names the period it counts in; one whose period does not
  hold Redis's now is answered `clock <now>`, and asked again for the right period.
- A claim carries a deadline (Redis's clock; the soonest its caller may give up on it): one Redis
  runs only after its caller gave up on it (a stall past the command timeout) is answered `late`
  and takes nothing; so is one whose settlement reached Redis first (replayed on a new connection
  while the claim still sat on the old one's socket).
- A settlement is applied once: its id (the request's) is marked in Redis, and a settlement sent
  again (replayed after a timeout that Redis in fact ran) changes nothing. It gives back what its
  claim reserved only if that claim is still held (`held`), so a claim never taken, or already
  swept, is not given back twice.
- A budget counter records the moment its seed from the ledger holds the rows of (`seeded`,
  Redis's clock: the ledger's reading less the ledger's commit lag, limiter.SEED_LAG; the seed
  sums the rows of requests that ended before it): a settlement of a request that ended before
  then is in the seed already and adds nothing to `used`, one that ended after it adds its spend
  (a Redis restarted empty is not charged the outage twice, nor spared its last requests). A
  settlement that finds no counter (replayed before anyone's claim seeded it) is kept beside it,
  by its request's end, for the seed to add. The rows of requests that ended since that moment
  come with the seed by request id: each is added unless its settlement is marked applied, and is
  marked seeded so that its settlement, coming later, adds nothing (it still frees its slot).
Every reply starts with the verdict and Redis's now, from which callers learn their offset.
"""

from gateway.limits.counters import REFILL_SECONDS, RETRY_IN_FLIGHT

LEASE_SECONDS = 60.0  # a lease not renewed for this long is a dead process's (renewed every third of it)
SETTLED_SECONDS = 3 * 86_400  # how long a settlement's mark is kept (a replay comes long before)

_COMMON = """
-- integers go to Redis as digits: Lua would write 1e+15, or -0, which HINCRBY refuses
local function int(x) return string.format('%d', x) end
local function num(x) return string.format('%.17g', x) end
-- Redis's clock, in seconds; a caller's time only where the counters were made for tests to move it
local function clock(given)
  if given ~= '-' then return tonumber(given) / 1e6 end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1e6
end
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
#       (epoch microseconds, "-": Redis's), tokens, deadline (epoch microseconds, "-": none), then
#       per budget reserve, seed, the time the seed holds the ledger to (epoch microseconds;
#       "-" when unknown) and the tag of the hash of the seed's recent rows, this claim's own
#       ("-": none); subjects; per subject rpm, tpm, concurrent,
#       budgets, and per budget limit, period start and end (epoch seconds).
ACQUIRE = _COMMON + """
local v = numbers(ARGV[2])
local id, now, E, S = ARGV[1], clock(v[1]), tonumber(v[2]), tonumber(ARGV[3])
local nowtext = num(now)
local deadline = tonumber(v[3])
if deadline and now * 1e6 > deadline then return 'late ' .. nowtext end
-- settled already: its caller gave up on it, and the settlement overtook it on another connection
if redis.call('EXISTS', SETTLED .. id) == 1 then return 'late ' .. nowtext end
local lease = now + LEASE
local a, k, vi, subjects, unseeded, refusals = 4, 1, 4, {}, {}, {}
local bi = 0
for s = 1, S do
  local sub = {rate = KEYS[k], leases = KEYS[k + 1], held = KEYS[k + 2], rpm = tonumber(ARGV[a]),
               tpm = tonumber(ARGV[a + 1]), conc = tonumber(ARGV[a + 2]), budgets = {}}
  local nb = tonumber(ARGV[a + 3])
  k, a = k + 3, a + 4
  for b = 1, nb do
    bi = bi + 1
    local start, expire = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    if now < start or now >= expire then return 'clock ' .. nowtext end  -- the caller's period is not Redis's
    sub.budgets[b] = {key = KEYS[k], limit = tonumber(ARGV[a]), reserve = tonumber(v[vi]),
                      seed = tonumber(v[vi + 1]), seeded = v[vi + 2], recent = v[vi + 3], expire = expire, index = bi}
    k, a, vi = k + 1, a + 3, vi + 4
  end
  sub.settles = sub.tpm or sub.conc or nb > 0
  subjects[s] = sub
end
local function refuse(s, kind, limit, wait, used, reserved, wanted, budget)
  refusals[#refusals + 1] = {s, kind, limit, wait, used, reserved, wanted, budget or 0}
end
for s, sub in ipairs(subjects) do
  if sub.settles then
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
    -- a counter is written whole (used, reserved, seeded) when it is seeded: no `used`, no counter
    local v = redis.call('HMGET', b.key, 'used', 'reserved')
    local used, reserved = tonumber(v[1]), tonumber(v[2])
    if used == nil then
      if b.seed == nil then unseeded[#unseeded + 1] = tostring(b.index) else
        -- the ledger's rows since `seeded`, by request id, in this claim's own hash: each counts
        -- unless its settlement did
        local recent, seed = {}, b.seed
        if b.recent ~= '-' then recent = redis.call('HGETALL', b.key .. ':recent:' .. b.recent) end
        for i = 1, #recent, 2 do
          if redis.call('EXISTS', SETTLED .. recent[i]) == 0 then
            redis.call('SET', SEEDED .. recent[i], '1', 'EX', SETTLED_TTL)
            seed = seed + tonumber(recent[i + 1])
          end
        end
        if #recent > 0 then redis.call('DEL', b.key .. ':recent:' .. b.recent) end
        -- settlements that came before the seed (replayed to a Redis restarted empty): those of
        -- requests that ended after the moment the seed holds the ledger to count on top of it
        local early = redis.call('HGETALL', b.key)
        for i = 1, #early, 2 do
          local at = string.match(early[i], '^ended:(%d+)$')
          if at and not (tonumber(b.seeded) and tonumber(at) < tonumber(b.seeded)) then seed = seed + tonumber(early[i + 1]) end
        end
        if #early > 0 then redis.call('DEL', b.key) end
        b.seed = seed
        redis.call('HSET', b.key, 'used', int(b.seed), 'reserved', 0, 'seeded', b.seeded)
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
if #unseeded > 0 then return 'seed ' .. nowtext .. ' ' .. table.concat(unseeded, ' ') end
-- the reply is one string, its fields separated by spaces: the verdict, Redis's now, each
-- subject's bucket levels after it ('' for no such limit), then each refusal's 8 fields
local out = {'ok', nowtext}
if #refusals > 0 then out[1] = 'refused' end
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
    if sub.settles then
      -- held: the claim is taken (its settlement gives back what it reserved), and its budgets' part
      redis.call('ZADD', sub.leases, lease, id)
      redis.call('PEXPIRE', sub.leases, math.ceil((lease - now) * 1000) + 60000)
      local held = ''
      for _, b in ipairs(sub.budgets) do
        redis.call('HINCRBY', b.key, 'reserved', int(b.reserve))
        held = held .. b.key .. '\\n' .. int(b.reserve) .. '\\n'
      end
      redis.call('HSET', sub.held, id, held)
      redis.call('PEXPIRE', sub.held, math.ceil((lease - now) * 1000) + 60000)
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

# KEYS: as ACQUIRE. ARGV: request id; one string of numbers: now (epoch microseconds, "-":
# Redis's), reserved tokens, used tokens, the request's end (epoch microseconds, "-": now), then
# per budget reserve, spent; subjects; per subject tpm, budgets. Returns 1, or 0 for a settlement
# applied already.
SETTLE = _COMMON + """
local v = numbers(ARGV[2])
local id, now, E, T, S = ARGV[1], clock(v[1]), tonumber(v[2]), tonumber(v[3]), tonumber(ARGV[3])
local ended = tonumber(v[4])
if ended then ended = ended / 1e6 else ended = now end
if not redis.call('SET', SETTLED .. id, '1', 'NX', 'EX', SETTLED_TTL) then return 0 end
local a, k, vi = 4, 1, 5
for s = 1, S do
  local rate, leases, held = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  local tpm, nb = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  k, a = k + 3, a + 2
  redis.call('ZREM', leases, id)
  -- not held: never taken (its caller gave up on it), or swept (its holder was thought dead) and
  -- released then; either way nothing of it is to be given back
  local mine = redis.call('HDEL', held, id) == 1
  if tpm then
    local tl = level(rate, 'tl', 'tt', tpm, now) - T
    if mine then tl = tl + E end
    if tl > tpm then tl = tpm end
    redis.call('HSET', rate, 'tl', num(tl), 'tt', num(now))
    -- kept until the tokens bucket is full again, and no shorter than the requests bucket needs
    redis.call('PEXPIRE', rate, math.max(redis.call('PTTL', rate), math.ceil((tpm - tl) * REFILL * 1000 / tpm) + 1000))
  end
  for b = 1, nb do
    local key, reserve, spent = KEYS[k], tonumber(v[vi]), tonumber(v[vi + 1])
    k, vi = k + 1, vi + 2
    local counter = redis.call('HMGET', key, 'used', 'seeded')
    if counter[1] then
      -- a request that ended before the counter was seeded from the ledger is in its seed already
      local seeded = tonumber(counter[2])
      -- and one whose row the seed counted, by its id, is in it too
      if not (seeded and ended * 1e6 < seeded) and redis.call('EXISTS', SEEDED .. id) == 0 then
        redis.call('HINCRBY', key, 'used', int(spent))
      end
      if mine then redis.call('HINCRBY', key, 'reserved', int(-reserve)) end
    elseif spent > 0 then
      -- no counter yet (a Redis restarted empty, the settlements of the outage replayed): kept
      -- by the request's end, for the seed from the ledger to add what the ledger lacks
      redis.call('HINCRBY', key, 'ended:' .. int(ended * 1e6), int(spent))
      if redis.call('PTTL', key) < 0 then redis.call('EXPIRE', key, SETTLED_TTL) end
    end
  end
end
return 1
"""


def header(script: str, prefix: str) -> str:
    """`script` with its constants; the settlements' marks live under the counters' prefix."""
    return (f"local REFILL, RETRY, LEASE = {REFILL_SECONDS!r}, {RETRY_IN_FLIGHT!r}, {LEASE_SECONDS!r}\n"
            f"local SETTLED, SETTLED_TTL = {_lua_string(prefix + 'settled:')}, {SETTLED_SECONDS}\n"
            f"local SEEDED = {_lua_string(prefix + 'seeded:')}\n" + script)


def _lua_string(text: str) -> str:
    return "'" + "".join(c if c.isalnum() or c in ":_-./" else f"\\{ord(c):03d}" for c in text) + "'"
