"""Limits on a key or an account, in one place: what a limit is (rules.py), the limits table and the
copy a running gateway keeps of it, the counters (counters.py; in Redis: redis_counters.py and its
scripts, redis_scripts.py), the limiter that claims and settles a request's share
(limiter.py, with what applies to a key and its account: applicable.py), what a request meets on
its path (on_request.py: its demand, its check, the x-ratelimit-* headers), and what a limit has
consumed (consumption.py, admin_limits.py). Imports store (the database, the ledger, prices, Redis's
client) and core; http imports it."""
