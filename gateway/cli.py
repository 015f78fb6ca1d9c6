"""The `gateway` command: the server, and the operator's tools for accounts, keys and usage.

    gateway serve [--host H] [--port P] [--workers N] [--config FILE]
    gateway config check [--config FILE]
    gateway accounts create ID [--name NAME]          gateway accounts list
    gateway keys create --account ID [--account ID2 ...] [--name NAME] [--scope S ...] [--expires-at T]
    gateway keys list [--account ID]                  gateway keys revoke KEY_ID
    gateway keys rotate KEY_ID [--grace SECONDS]      gateway audit [--since T]
    gateway usage [--account ID ...] [--model vendor/name] [--since T] [--until T]
                  [--group-by model,day,key,user,outcome,endpoint] [--outcome completed,...]
    gateway limits set|show|clear (--key KEY_ID | --account ID) ...   (gateway/limits_cli.py)

Lists and reports print as a table, or with --format json or csv. Every command works on the
database of GATEWAY_DATABASE_URL (or the config file), says which on standard error, and upgrades
its schema first if needed; only `serve` creates a database (a SQLite file that is missing is an
error naming the URL). Changes go through gateway/admin.py, as the HTTP API's do, and are
in its audit trail as made by "cli (<OS user>)".
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway import __version__, admin, cli_output, limits_cli
from gateway.cli_output import as_json, as_text, emit
from gateway.core import config
from gateway.core.config import Settings
from gateway.core.errors import ConfigError
from gateway.store import accounts, database, usage
from gateway.store.accounts import AccountsError, NewKey
from gateway.store.meter import OUTCOMES
from gateway.vendors.registry import load_settings

T = TypeVar("T")


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """`env` stands in for the environment (tests provision databases in-process with it).

    What a command prints holds names others chose (accounts, keys, the audit's actors, clients'
    `user`): it is all written through cli_output's escaping writers, argparse's messages and
    every error included. The server's lines are its logs' (gateway/http/observe/logs.py)."""
    with cli_output.escaping_output():
        args = _parser().parse_args(argv)
        if args.command != "serve":
            return _run(args, env)
    return _run(args, env)


def _run(args: argparse.Namespace, env: Mapping[str, str] | None) -> int:
    if getattr(args, "config", None):  # --config FILE is GATEWAY_CONFIG=FILE, for this command
        env = {**(os.environ if env is None else env), "GATEWAY_CONFIG": args.config}
    try:
        settings = load_settings(env)
    except ConfigError as exc:
        print(f"gateway: configuration error: {exc}", file=sys.stderr)
        return 1 if args.command == "config" else 2
    for var in config.stray_variables(os.environ if env is None else env):
        print(f"gateway: {var} names no setting of the gateway, which leaves it alone{config.suggestion(var)} "
              "(the settings: README.md, \"Configuration\")", file=sys.stderr)
    if args.command == "config":
        return _check_config(settings)
    if args.command == "serve":
        return _serve(settings, args.host, args.port, args.workers)
    try:
        return asyncio.run(_administer(settings, args))
    except (AccountsError, ConfigError) as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 1
    except (SQLAlchemyError, OSError) as exc:
        print(f"gateway: cannot use the database: {(str(exc).splitlines() or [type(exc).__name__])[0]}",
              file=sys.stderr)
        return 1


def _contract_version() -> str:
    """The served contract's `info.version` (generated/openapi.json, as installed)."""
    return json.loads((files("generated") / "openapi.json").read_text())["info"]["version"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description="LLM completions gateway (EGP API v5)")
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {__version__} (API contract {_contract_version()})")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--host", help="listen address (default GATEWAY_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default GATEWAY_PORT or 8000)")
    serve.add_argument("--workers", type=int, help="processes serving the port (default GATEWAY_WORKERS or 1)")
    _config_option(serve)

    config_commands = commands.add_parser("config", help="check the configuration").add_subparsers(
        dest="action", required=True)
    _config_option(config_commands.add_parser(
        "check", help="validate the config file and GATEWAY_* variables as `serve` would, and print the "
                      "effective settings (secrets masked); exit 1 naming what is wrong"))

    account_commands = commands.add_parser("accounts", help="create and list accounts").add_subparsers(
        dest="action", required=True)
    create = account_commands.add_parser("create", help="create an account")
    create.add_argument("id", help="the account id clients select with x-selected-account-id")
    create.add_argument("--name", default="", help="a description for people")
    _format_option(account_commands.add_parser("list", help="list accounts"))

    key_commands = commands.add_parser("keys", help="create, list and revoke API keys").add_subparsers(
        dest="action", required=True)
    create = key_commands.add_parser("create", help="create a key (printed once; only its hash is stored)")
    create.add_argument("--account", action="append", required=True, dest="accounts", metavar="ID",
                        help="an account the key grants (repeat for several)")
    create.add_argument("--name", default="", help="a description for people, e.g. who holds the key")
    create.add_argument("--scope", action="append", dest="scopes", choices=accounts.SCOPES,
                        help="what the key may call (repeat for several; default: "
                             f"{' and '.join(accounts.DEFAULT_SCOPES)}; admin: everything under /v5/admin/)")
    create.add_argument("--expires-at", type=_instant, help="when the key stops working (e.g. 2027-01-01)")
    limits_cli.limit_options(create.add_argument_group("its limits, made with it (as `limits set` sets them)"))
    create.add_argument("--format", choices=("text", "json"), default="text")
    listing = key_commands.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--account", help="only keys that grant this account")
    _format_option(listing)
    revoke = key_commands.add_parser(
        "revoke", help="revoke a key (running gateways stop taking it within key_cache_seconds)")
    revoke.add_argument("key_id", help="the key's id (key_...), as `keys list` shows it")
    rotate = key_commands.add_parser("rotate", help="a new key in place of one (same accounts, scopes, limits); "
                                                    "the old one works on for the grace period")
    rotate.add_argument("key_id", help="the key's id (key_...)")
    rotate.add_argument("--grace", type=int, default=0, metavar="SECONDS",
                        help="how long the old key keeps working: 0 (the default) revokes it now, else at least "
                             "key_cache_seconds, so that it ends exactly on every gateway")
    rotate.add_argument("--format", choices=("text", "json"), default="text")
    commands.add_parser("migrate", help="create the database if there is none and bring its tables up to date "
                                        "(what `serve` does first; it creates no account and no key)")
    trail = commands.add_parser("audit", help="the audit trail: who changed what, when, from where")
    trail.add_argument("--since", type=_instant, help="from this instant, inclusive")
    _format_option(trail)

    report = commands.add_parser("usage", help="usage and its cost per account (and model, day, key, user or "
                                               "outcome) over a time range")
    report.add_argument("--account", action="append", dest="accounts", metavar="ID",
                        help="only this account (repeat for several; default: all)")
    report.add_argument("--model", help="only this model (vendor/name)")
    report.add_argument("--since", type=_instant, help="from this instant, inclusive (e.g. 2026-11-01 or "
                        "2026-11-01T08:00:00+01:00; UTC unless an offset is given)")
    report.add_argument("--until", type=_instant, help="to this instant, exclusive")
    report.add_argument("--group-by", type=_names(tuple(usage.DIMENSIONS)), default=usage.DEFAULT_GROUP_BY,
                        help=f"sum per these, besides the account, comma-separated: {', '.join(usage.DIMENSIONS)} "
                             "(default: model; day is the UTC day)")
    report.add_argument("--outcome", type=_names(OUTCOMES), dest="outcomes",
                        help=f"only requests with these outcomes, comma-separated: {', '.join(OUTCOMES)}")
    _format_option(report)
    limits_cli.add_commands(commands)
    return parser


def _config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="the config file (TOML; default GATEWAY_CONFIG, or none)")


def _check_config(settings: Settings) -> int:
    """`gateway config check`: the checks a start makes (services.check), then the settings."""
    from gateway.services import check, redactor

    try:
        check(settings)
    except ConfigError as exc:
        print(f"gateway: configuration error: {exc}", file=sys.stderr)
        return 1
    # Scrubbed as the logs are, too: a secret written where no SecretStr holds it (an option) stays unshown.
    print(redactor(settings)(json.dumps(_masked(settings.model_dump(mode="json"), settings), indent=2)))
    return 0


def _masked(dump: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The settings' dump (SecretStr fields already show as stars), with the URLs among the secrets
    shown as URLs again, their passwords masked: which database and Redis is worth seeing."""
    for name in ("database_url", "redis_url"):
        if url := getattr(settings, name).get_secret_value():
            try:
                dump[name] = make_url(url).render_as_string(hide_password=True)
            except ArgumentError:
                pass  # not a URL: left as stars
    return dump


def _format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table")


def _names(known: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """An option taking a comma-separated list of `known` names (each kept once, in order)."""
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
        unknown = [name for name in names if name not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"{', '.join(unknown) or 'nothing'}: choose from {', '.join(known)}")
        return names

    return parse


def _instant(text: str) -> datetime:
    try:
        return usage.parse_instant(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


async def _administer(settings: Settings, args: argparse.Namespace) -> int:
    url = settings.database_url.get_secret_value()
    print(f"gateway: database {_described(url, _creates(args))}", file=sys.stderr)
    engine = database.connect(url)
    actor = admin.Actor.cli()
    try:
        await database.prepare(engine, _nothing)
        match args.command, getattr(args, "action", None):
            case "migrate", _:
                print("gateway: the database is ready (tables up to date)", file=sys.stderr)
            case "limits", _:
                out = await limits_cli.run(engine, settings, args, actor)
                if isinstance(out, str):
                    print(out)
                else:
                    emit(out, limits_cli.COLUMNS, args.format)
            case "accounts", "create":
                account = await admin.create_account(engine, actor, args.id, args.name)
                print(f"created account {account.id}")
            case "accounts", "list":
                found = await admin.list_accounts(engine)
                emit([dataclasses.asdict(a) for a in found], ("id", "name", "created_at"), args.format)
            case "keys", "create":
                new = await admin.create_key(engine, actor, args.accounts, args.name,
                                             args.scopes or accounts.DEFAULT_SCOPES, args.expires_at,
                                             with_limits=limits_cli.limit_values(args))
                _print_new_key(new, args.format)
            case "keys", "list":
                now = datetime.now(UTC)
                rows = [dataclasses.asdict(view.info) | {"accounts": " ".join(view.info.accounts),
                                                         "scopes": " ".join(view.info.scopes),
                                                         "state": view.info.state(now)}
                        for view in await admin.list_keys(engine, args.account)]
                emit(rows, ("id", "name", "accounts", "scopes", "state", "created_at", "expires_at", "revoked_at"),
                     args.format)
            case "keys", "revoke":
                await admin.revoke_key(engine, actor, args.key_id)
                print(f"revoked key {args.key_id}; running gateways refuse it within "
                      f"{settings.key_cache_seconds:g}s")
            case "keys", "rotate":
                old, new = await admin.rotate_key(engine, actor, args.key_id, args.grace, settings.key_cache_seconds)
                print(f"key {old.id} works until {as_text(old.revoked_at)}, then is revoked", file=sys.stderr)
                _print_new_key(new, args.format)
            case "audit", _:
                entries = await admin.audit(engine, args.since)
                rows = [dataclasses.asdict(e) | ({} if args.format == "json" else
                                                 {"detail": json.dumps(e.detail, sort_keys=True)}) for e in entries]
                emit(rows, ("at", "actor", "address", "action", "object_kind", "object_id", "detail"), args.format)
            case "usage", _:
                lines = await _read(engine, lambda c: usage.report(
                    c, accounts=args.accounts, start=args.since, end=args.until, model=args.model,
                    outcomes=args.outcomes, group_by=args.group_by))
                emit(lines, usage.columns(args.group_by), args.format)
        return 0
    finally:
        await engine.dispose()


async def _nothing(connection: AsyncConnection) -> None:
    return None  # the CLI never creates the first-start account: an operator creates their own


# Whether a command may create the SQLite file it names: `migrate`, anywhere; `accounts create`, the
# first step of provisioning (the peer benchmark's, ../shared/peers/run_ours.sh, too), in a
# directory that exists; no other (a report or a key on an empty database is a mistake).
NEVER, IN_A_DIRECTORY, ANYWHERE = "never", "in a directory that exists", "anywhere"


def _creates(args: argparse.Namespace) -> str:
    if args.command == "migrate":
        return ANYWHERE
    return IN_A_DIRECTORY if (args.command, getattr(args, "action", None)) == ("accounts", "create") else NEVER


def _described(url: str, creates: str = NEVER) -> str:
    """The database `url` names, as the operator should read it (a SQLite file's absolute path),
    if it exists or the command may create it (said): an administrative command that created an
    empty database somewhere unsaid (say, run from another directory than the gateway's) would
    report on nothing, or create keys no gateway reads."""
    parsed = database.engine_url(url)
    if parsed.get_backend_name() != "sqlite":
        return parsed.render_as_string(hide_password=True).replace("+asyncpg", "")
    path = Path(parsed.database).resolve()
    if path.is_file():
        return f"sqlite:///{path}"
    if creates == ANYWHERE or (creates == IN_A_DIRECTORY and path.parent.is_dir()):
        return f"sqlite:///{path} (none was there: created)"
    raise ConfigError(f"no database at sqlite:///{path} (from {url!r}): `gateway serve` or `gateway migrate` creates "
                      "it (and `gateway accounts create`, in a directory that exists); check GATEWAY_DATABASE_URL (or "
                      "the config file's database_url) and the directory you run in")


async def _read(engine: AsyncEngine, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    async with engine.connect() as connection:
        return await work(connection)


def _print_new_key(new: NewKey, fmt: str) -> None:
    info = new.info
    if fmt == "json":
        print(json.dumps({"id": info.id, "name": info.name, "accounts": list(info.accounts),
                          "scopes": list(info.scopes), "expires_at": as_json(info.expires_at),
                          "created_at": as_text(info.created_at), "key": new.key}))
    else:
        print(f"created key {info.id} for account(s) {', '.join(info.accounts)} with scope(s) "
              f"{', '.join(info.scopes)}")
        print(new.key)
    print("The key is shown only this once: store it now (the gateway keeps only its hash).", file=sys.stderr)


def _serve(settings: Settings, host: str | None, port: int | None, workers: int | None) -> int:
    # httpx (which Connexion imports) loads its command-line client on import whenever rich and
    # pygments are installed, as they are beside the dev tools: megabytes of every worker that a
    # server never uses. Without them httpx does without it, as here.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[assignment]
    from gateway.http.observe import metrics
    from gateway.http.server import server
    from gateway.services import create_app, redactor

    if workers is not None and workers < 1:
        print("gateway: --workers must be 1 or more", file=sys.stderr)
        return 2
    settings = settings.model_copy(update={"host": host or settings.host, "port": port or settings.port,
                                           "workers": workers or settings.workers})
    try:
        sockets = server.listen(settings)
    except OSError as exc:
        print(f"gateway: cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    # Port 0 asks for any free port: what is printed and logged is the one the kernel gave.
    settings = settings.model_copy(update={"port": sockets[0].getsockname()[1]})
    if settings.metrics:
        metrics.prepare_directory(settings)  # before any serving process starts: they share it
    factory = functools.partial(create_app, settings)  # each worker builds its own app
    try:
        app = factory()  # here, too: a configuration the vendors refuse stops the start with a clear message
    except ConfigError as exc:
        for sock in sockets:
            sock.close()
        print(f"gateway: configuration error: {exc}", file=sys.stderr)
        return 2
    return server.run(factory, settings, redactor(settings), built=app, sockets=sockets)


if __name__ == "__main__":
    sys.exit(main())
