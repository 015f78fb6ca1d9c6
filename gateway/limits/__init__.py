"""Limits on a key or an account, in one place (docs/limits.md says what they do):

    rules.py            what a limit is (Limits, Budget and its Unit, Period, Subject), and what a
                        change may set of them
    table.py            the limits table, and the copy of it a running gateway keeps (LimitsTable)
    applicable.py       the limits that apply to one key on one account, worked out once per copy
    counters.py         a request's claim on the counters, their verdict, a store's interface
    memory_counters.py  the counters in this process's memory (one worker)
    redis_counters.py   the counters in Redis, shared by every worker and host; redis_scripts.py, its Lua
    limiter.py          the limiter: a claim asked of the counters, its verdict, its settlement, the
                        counters' store away and back
    verdicts.py         what the limiter decided (Grant; Asking: a verdict on its way)
    on_request.py       what a request meets: its demand, its check, the refusal's error and the
                        x-ratelimit-* headers
    ledger_sums.py      what a key or an account consumed, summed from the ledger (a budget's seed)
    consumption.py      what each limit has consumed so far, as administration shows it

It imports store (the database and its tables, the ledger's outcomes, prices, the Redis client) and
core; http imports it, and so does administration (gateway/admin.py)."""
