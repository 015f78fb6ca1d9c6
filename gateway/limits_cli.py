"""`gateway limits`: set, show and clear the limits of a key or an account (gateway/cli.py runs it).

    gateway limits set (--key KEY_ID | --account ID) [--rpm N] [--tpm N] [--concurrent N]
                       [--budget-tokens N] [--budget-usd X] [--period day|month] [--models PATTERN ...]
    gateway limits show [--key KEY_ID | --account ID] [--format table|json]
    gateway limits clear (--key KEY_ID | --account ID) (--all | --rpm | --tpm | --concurrent |
                         --budget-tokens | --budget-usd | --models ...)

`show` puts what is being consumed next to each limit: the live counters when GATEWAY_REDIS_URL
names the gateways' Redis, else what the ledger says (requests and tokens of the last minute,
the budget period's consumption); requests in flight are known only to Redis (or to the gateway
process that counts them).
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.core.config import Settings
from gateway.http.limiting import duration
from gateway.store import database
from gateway.store.accounts import AccountsError
from gateway.store.counters import Reading
from gateway.store.counters_redis import RedisCounters
from gateway.store.limiter import consumed
from gateway.store.limits import ACCOUNT, KEY, PERIODS, UNITS, Limits, Subject, clear_limits, read_all, set_limits
from gateway.store.meter import REFUSED
from gateway.store.resp import RedisError, RedisUnavailable
from gateway.store.tables import ledger

COLUMNS = ("subject", "id", "limit", "value", "used", "remaining", "resets", "source")
# The largest count or amount a limit takes (requests, tokens, nano-dollars): Redis counts in its Lua
# scripts with doubles, exact below 2^53, and the counters' arithmetic must stay exact to the unit
# (a TPM of 2^63 read back as a bucket fuller than its limit: "used -1"). The same bound as
# store/limits.py MAX_BUDGET_USD in nano-dollars.
MAX_AMOUNT = 10**15
_CLEARABLE = ("rpm", "tpm", "concurrent", *(unit.limit_column for unit in UNITS.values()), "models", "cache")


def add_commands(commands: Any) -> None:
    limits = commands.add_parser("limits", help="limits of a key or an account: rates, concurrency, budgets, "
                                 "models").add_subparsers(dest="action", required=True)
    put = limits.add_parser("set", help="set limits (the others stay as they are)")
    _subject(put, required=True)
    put.add_argument("--rpm", type=_positive, metavar="N", help="requests per minute")
    put.add_argument("--tpm", type=_positive, metavar="N", help="tokens (prompt + completion) per minute")
    put.add_argument("--concurrent", type=_positive, metavar="N", help="requests in flight")
    for unit in UNITS.values():
        put.add_argument(f"--budget-{unit.name}", type=_amount(unit.parse), dest=unit.limit_column,
                         metavar=unit.metavar, help=f"{unit.noun or unit.name} per budget period")
    put.add_argument("--period", choices=PERIODS, dest="budget_period",
                     help="the budget's period, a UTC calendar day or month (default month)")
    put.add_argument("--models", nargs="+", metavar="PATTERN", type=_pattern,
                     help="the only models it may call: glob patterns such as openai/* local/smollm2-135m")
    put.add_argument("--cache", choices=("on", "off"), type=str.lower,
                     help="whether the response cache serves it (docs/cache.md; the key's wins over its account's)")
    show = limits.add_parser("show", help="limits, with what is being consumed")
    _subject(show, required=False)
    show.add_argument("--format", choices=("table", "json"), default="table")
    clear = limits.add_parser("clear", help="remove limits")
    _subject(clear, required=True)
    clear.add_argument("--all", action="store_true", help="every limit of it")
    for name in _CLEARABLE:
        clear.add_argument(f"--{name.replace('_', '-')}", dest="clear", action="append_const", const=name,
                           help="this limit (several may be given)")


def _subject(parser: argparse.ArgumentParser, required: bool) -> None:
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--key", metavar="KEY_ID", help="a key's id (key_...), as `keys list` shows it")
    group.add_argument("--account", metavar="ID")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= MAX_AMOUNT:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_AMOUNT:,}")
    return value


def _pattern(text: str) -> str:
    """A model pattern of an allow-list: one that can match a "vendor/name" (an empty one, or one
    naming no vendor, would set a list that refuses every model)."""
    pattern = text.strip()
    if not pattern:
        raise argparse.ArgumentTypeError("an empty pattern matches no model (to lift the allow-list: "
                                         "gateway limits clear --models)")
    if "/" not in pattern and not any(c in pattern for c in "*?["):
        raise argparse.ArgumentTypeError(f"{pattern!r} matches no model: models are written vendor/name "
                                         "(e.g. openai/* or local/smollm2-135m)")
    return pattern


def _amount(parse: Any) -> Any:
    def parsed(text: str) -> int:
        try:
            value = parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
        if value > MAX_AMOUNT:
            raise argparse.ArgumentTypeError(f"{text!r}: must be at most {MAX_AMOUNT:,}")
        return value
    return parsed


def subject_of(args: argparse.Namespace) -> Subject | None:
    if args.key:
        return Subject(KEY, args.key)
    return Subject(ACCOUNT, args.account) if args.account else None


async def run(engine: AsyncEngine, settings: Settings, args: argparse.Namespace) -> list[dict[str, Any]] | str:
    """What to print: rows for `show`, a sentence for the others."""
    subject = subject_of(args)
    interval = f"running gateways apply it within {settings.limits_cache_seconds:g}s"
    if args.action == "set":
        values = {name: getattr(args, name) for name in (*_CLEARABLE, "budget_period")
                  if getattr(args, name) is not None}
        if "cache" in values:
            values["cache"] = values["cache"] == "on"
        if not values:
            raise AccountsError("say which limits to set: --rpm, --tpm, --concurrent, "
                                + ", ".join(f"--budget-{unit.name}" for unit in UNITS.values()) + ", --models, --cache")
        async with database.writing(engine) as connection:
            limits = await set_limits(connection, subject, values)
        return f"limits of {subject}: {_described(limits)}; {interval}"
    if args.action == "clear":
        if args.all == bool(args.clear):
            raise AccountsError("say what to clear: --all, or some of "
                                + ", ".join(f"--{name.replace('_', '-')}" for name in _CLEARABLE))
        async with database.writing(engine) as connection:
            left = await clear_limits(connection, subject, None if args.all else args.clear)
        return f"limits of {subject}: {_described(left) if left else 'none'}; {interval}"
    async with engine.connect() as connection:
        found = await read_all(connection)
    if subject is not None:
        found = {subject: found[subject]} if subject in found else {}
    rows: list[dict[str, Any]] = []
    redis_url = settings.redis_url.get_secret_value()
    live = RedisCounters(redis_url, settings.redis_prefix) if redis_url else None
    try:
        for s, limits in sorted(found.items(), key=lambda item: (item[0].kind, item[0].id)):
            rows += await _rows(engine, live, s, limits)
    finally:
        if live is not None:
            await live.close()
    return rows


def _described(limits: Limits) -> str:
    return ", ".join(f"{name} {', '.join(value) if isinstance(value, list) else value}"
                     for name, value in limits.describe().items()) or "none"


async def _rows(engine: AsyncEngine, live: RedisCounters | None, subject: Subject, limits: Limits) -> list[dict]:
    now = time.time()
    reading, source = Reading(), "ledger"
    if live is not None:
        try:
            reading, source = await live.read(subject, limits, now), "redis"
        except (RedisError, RedisUnavailable) as exc:
            live, source = None, f"ledger (redis unavailable: {type(exc).__name__})"
    minute = await _last_minute(engine, subject, now) if live is None else (0, 0)
    base = {"subject": subject.kind, "id": subject.id, "source": source}
    rows = []
    for name, window, used_last_minute in (("rpm", reading.requests, minute[0]), ("tpm", reading.tokens, minute[1])):
        limit = getattr(limits, name)
        if limit is None:
            continue
        if window is not None:
            # A limit set before MAX_AMOUNT bounded it reads back rounded as a double: never "used -1".
            remaining = min(window.remaining, limit)
            rows.append(base | {"limit": name, "value": limit, "used": limit - remaining, "remaining": remaining,
                                "resets": f"full in {duration(window.reset)}"})
        else:
            rows.append(base | {"limit": name, "value": limit, "used": used_last_minute,
                                "remaining": max(limit - used_last_minute, 0), "resets": "(last 60s)"})
    if limits.concurrent is not None:
        in_flight = reading.in_flight
        rows.append(base | {"limit": "concurrent", "value": limits.concurrent, "used": in_flight,
                            "remaining": None if in_flight is None else max(limits.concurrent - in_flight, 0),
                            "resets": "", "source": source if in_flight is not None else "(in the gateway's memory)"})
    for budget in limits.budgets:
        period = budget.period_at(now)
        counter = f"{budget.unit.name}:{period.id}"
        if counter in reading.budgets:
            used, reserved = reading.budgets[counter]
            row_source = f"redis ({budget.unit.show(reserved)} reserved in flight)"
        else:
            used, row_source = await consumed(engine, subject, budget.unit, period), "ledger"
        rows.append(base | {"limit": budget.unit.limit_column, "value": f"{budget.unit.show(budget.limit)} per "
                            f"{budget.period}", "used": budget.unit.show(used),
                            "remaining": budget.unit.show(max(budget.limit - used, 0)),
                            "resets": period.end.isoformat().replace("+00:00", "Z"), "source": row_source})
    if limits.cache is not None:
        rows.append(base | {"limit": "cache", "value": "on" if limits.cache else "off", "used": None,
                            "remaining": None, "resets": "", "source": ""})
    if limits.models is not None:
        rows.append(base | {"limit": "models", "value": " ".join(limits.models), "used": None, "remaining": None,
                            "resets": "", "source": ""})
    return rows


async def _last_minute(engine: AsyncEngine, subject: Subject, now: float) -> tuple[int, int]:
    who = ledger.c.key_id if subject.kind == KEY else ledger.c.account_id
    since = datetime.fromtimestamp(now, UTC) - timedelta(seconds=60)
    query = select(func.count(), func.coalesce(func.sum(ledger.c.total_tokens), 0)).where(
        who == subject.id, ledger.c.started_at >= since, ledger.c.outcome != REFUSED)
    async with engine.connect() as connection:
        count, tokens = (await connection.execute(query)).one()
    return int(count), int(tokens)
