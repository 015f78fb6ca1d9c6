"""`gateway limits`: set, show and clear the limits of a key or an account (gateway/cli.py runs it).

    gateway limits set (--key KEY_ID | --account ID) [--rpm N] [--tpm N] [--concurrent N]
                       [--budget-tokens N] [--budget-usd X] [--period day|month] [--models PATTERN ...]
    gateway limits show [--key KEY_ID | --account ID] [--format table|json]
    gateway limits clear (--key KEY_ID | --account ID) (--all | --rpm | --tpm | --concurrent |
                         --budget-tokens | --budget-usd | --models ...)

`show` puts what is being consumed next to each limit: the live counters when GATEWAY_REDIS_URL
names the gateways' Redis, else what the ledger says (gateway/limits/consumption.py). The changes
are gateway/admin.py's, as those of /v5/admin/limits/... are.
"""

from __future__ import annotations

import argparse
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway import admin
from gateway.core.config import Settings
from gateway.limits.consumption import Consumed, consumption
from gateway.limits.on_request import duration
from gateway.limits.redis_counters import RedisCounters
from gateway.limits.rules import ACCOUNT, KEY, PERIODS, UNITS, Limits, Subject
from gateway.limits.rules import MAX_AMOUNT, check_pattern
from gateway.store.accounts import AccountsError

COLUMNS = ("subject", "id", "limit", "value", "used", "remaining", "resets", "source")
_CLEARABLE = ("rpm", "tpm", "concurrent", *(unit.limit_column for unit in UNITS.values()), "models", "cache")


def add_commands(commands: Any) -> None:
    limits = commands.add_parser("limits", help="limits of a key or an account: rates, concurrency, budgets, "
                                 "models").add_subparsers(dest="action", required=True)
    put = limits.add_parser("set", help="set limits (the others stay as they are)")
    _subject(put, required=True)
    limit_options(put)
    show = limits.add_parser("show", help="limits, with what is being consumed")
    _subject(show, required=False)
    show.add_argument("--format", choices=("table", "json"), default="table")
    clear = limits.add_parser("clear", help="remove limits")
    _subject(clear, required=True)
    clear.add_argument("--all", action="store_true", help="every limit of it")
    for name in _CLEARABLE:
        clear.add_argument(f"--{name.replace('_', '-')}", dest="clear", action="append_const", const=name,
                           help="this limit (several may be given)")


def limit_options(parser: Any) -> None:  # a parser, or a group of its options
    """The options of the limits `limits set` sets (and `keys create` makes with a key)."""
    parser.add_argument("--rpm", type=_positive, metavar="N", help="requests per minute")
    parser.add_argument("--tpm", type=_positive, metavar="N", help="tokens (prompt + completion) per minute")
    parser.add_argument("--concurrent", type=_positive, metavar="N", help="requests in flight")
    for unit in UNITS.values():
        parser.add_argument(f"--budget-{unit.name}", type=_amount(unit.parse), dest=unit.limit_column,
                            metavar=unit.metavar, help=f"{unit.noun or unit.name} per budget period")
    parser.add_argument("--period", choices=PERIODS, dest="budget_period",
                        help="the budget's period, a UTC calendar day or month (default month)")
    parser.add_argument("--models", nargs="+", metavar="PATTERN", type=_pattern,
                        help="the only models it may call: glob patterns such as openai/* local/smollm2-135m")
    parser.add_argument("--cache", choices=("on", "off"), type=str.lower,
                        help="whether the response cache serves it (docs/cache.md; the key's wins over its account's)")


def limit_values(args: argparse.Namespace) -> dict[str, Any]:
    """The limits `limit_options` gave, as the limits table's columns."""
    values = {name: getattr(args, name) for name in (*_CLEARABLE, "budget_period") if getattr(args, name) is not None}
    if "cache" in values:
        values["cache"] = values["cache"] == "on"
    return values


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
    try:
        return check_pattern(text)
    except AccountsError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("clear `models`", "gateway limits clear --models")) from None


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


async def run(engine: AsyncEngine, settings: Settings, args: argparse.Namespace,
              actor: admin.Actor) -> list[dict[str, Any]] | str:
    """What to print: rows for `show`, a sentence for the others."""
    subject = subject_of(args)
    interval = f"running gateways apply it within {settings.limits_cache_seconds:g}s"
    if args.action == "set":
        values = limit_values(args)
        if not values:
            raise AccountsError("say which limits to set: --rpm, --tpm, --concurrent, "
                                + ", ".join(f"--budget-{unit.name}" for unit in UNITS.values()) + ", --models, --cache")
        limits = await admin.set_limits(engine, actor, subject, values)
        return f"limits of {subject}: {_described(limits) if limits else 'none'}; {interval}"
    if args.action == "clear":
        if args.all == bool(args.clear):
            raise AccountsError("say what to clear: --all, or some of "
                                + ", ".join(f"--{name.replace('_', '-')}" for name in _CLEARABLE))
        left = await admin.clear_limits(engine, actor, subject, None if args.all else args.clear)
        return f"limits of {subject}: {_described(left) if left else 'none'}; {interval}"
    found = await admin.limits_of(engine)
    if subject is not None:
        found = {subject: found[subject]} if subject in found else {}
    rows: list[dict[str, Any]] = []
    redis_url = settings.redis_url.get_secret_value()
    live = RedisCounters(redis_url, settings.redis_prefix) if redis_url else None
    try:
        for s, limits in sorted(found.items(), key=lambda item: (item[0].kind, item[0].id)):
            rows += [_row(s, limits, used) for used in await consumption(engine, live, s, limits)]
    finally:
        if live is not None:
            await live.close()
    return rows


def _described(limits: Limits) -> str:
    return ", ".join(f"{name} {', '.join(value) if isinstance(value, list) else value}"
                     for name, value in limits.describe().items()) or "none"


def _row(subject: Subject, limits: Limits, used: Consumed) -> dict[str, Any]:
    """One line of `limits show`, as people read it."""
    row = {"subject": subject.kind, "id": subject.id, "limit": used.limit, "value": used.value, "used": used.used,
           "remaining": used.remaining, "resets": "", "source": used.source}
    if used.limit == "models":
        return row | {"value": " ".join(used.value)}
    if used.limit == "cache":
        return row | {"value": "on" if used.value else "off"}
    if used.resets_at is not None:  # a budget
        unit = next(unit for unit in UNITS.values() if unit.limit_column == used.limit)
        return row | {"value": f"{unit.show(used.value)} per {used.period}", "used": unit.show(used.used),
                      "remaining": unit.show(used.remaining), "resets": used.resets_at.isoformat().replace("+00:00", "Z")}
    if used.resets_in is not None:
        return row | {"resets": f"full in {duration(used.resets_in)}"}
    return row | {"resets": "(last 60s)" if used.last_minute else ""}
