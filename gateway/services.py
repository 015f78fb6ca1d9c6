"""The service assembly: settings, the vendors, the database, the key store, the ledger and
admission, built into one app and kept for the gateway's life.

`create_app` is what `gateway serve` runs: the HTTP app (gateway/http/server/app.py) with the handlers'
operation table and a lifespan that opens everything at start and closes it at shutdown, in order.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.core.config import Settings
from gateway.core.errors import ConfigError, StartupFailed
from gateway.core.redaction import Redactor
from gateway.http.context import Services
from gateway.http.server import app as http_app
from gateway.http.server import security, server
from gateway.http.server.connexion_overrides.direct_call import DirectCallApp
from gateway.limits.counters import Counters
from gateway.limits.limiter import Limiter
from gateway.limits.memory_counters import MemoryCounters
from gateway.limits.redis_counters import RedisCounters
from gateway.limits.table import LimitsTable
from gateway.planner.admission import Admission
from gateway.store import accounts, database, key_cache
from gateway.store.ledger import Ledger
from gateway.store.prices import Prices
from gateway.store.response_cache import MemoryStore, RedisStore, Store
from gateway.store.response_purge import ResponsePurge
from gateway.store.response_writer import ResponseWriter
from gateway.store.responses import ResponseStore
from gateway.store.stored_prices import StoredPriceReader
from gateway.vendors import registry as vendors
from gateway.vendors.registry import Registry
from handlers import resolve, unmatched

log = logging.getLogger("gateway")


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings from GATEWAY_CONFIG and the environment (`env`, default os.environ)."""
    return vendors.load_settings(env)


def redactor(settings: Settings) -> Redactor:
    """The one scrubber of secrets for a gateway: its vendors' keys, and anything key-shaped."""
    return Redactor(secret for vendor in settings.vendors.values() for secret in vendor.secrets)


def check(settings: Settings) -> tuple[Registry, Prices]:
    """What a start refuses of `settings` beyond their own validation, found without starting:
    the vendors' options (their adapters are built), the price table, the database URL; and of
    the gateway itself, a contract whose operations are not the handlers' (handlers.unmatched: an
    operation without a handler, or a handler without its operation). A ConfigError here stops
    `gateway serve` with one line, in the one process that reads the configuration, before any
    worker starts; `gateway config check` runs the same."""
    if mismatched := unmatched(http_app.operation_ids(http_app.contract())):
        raise ConfigError(f"the contract and the handlers differ: {'; '.join(mismatched)}")
    registry = Registry.from_settings(settings)
    prices = Prices.load(settings.prices)  # the packaged table and [prices]: a bad entry stops the start too
    database.engine_url(settings.database_url.get_secret_value())
    return registry, prices


def create_app(settings: Settings | None = None) -> DirectCallApp:
    settings = settings or load_settings()
    # Adapters are built here, so a configuration they refuse stops the start with a clear
    # message (gateway/cli.py) instead of a traceback from the lifespan.
    registry, prices = check(settings)
    redact = redactor(settings)
    return http_app.create_app(settings, functools.partial(lifespan, settings, registry, prices, redact), resolve,
                               redact)


@contextlib.asynccontextmanager
async def lifespan(settings: Settings, registry: Registry, prices: Prices, redact: Redactor,
                   app: Any) -> AsyncIterator[dict[str, Any]]:
    try:
        engine = database.connect(settings.database_url.get_secret_value())
    except OSError as exc:  # the SQLite file's directory cannot be made (a read-only filesystem)
        log.error("cannot open the database: %s", exc)
        raise StartupFailed() from exc
    try:
        # Migrations run here, at every start; on an empty database the first account and key are
        # created so that a fresh clone works, unless `bootstrap` is off (production, the image:
        # a key printed into container logs is a key leaked; the operator creates their own).
        first_key = await database.prepare(engine, accounts.bootstrap if settings.bootstrap else _no_bootstrap)
    except Exception as exc:
        log.error("cannot open the database %s: %s", engine.url.render_as_string(hide_password=True),
                  (str(exc).strip().splitlines() or [type(exc).__name__])[0])
        await engine.dispose()
        raise StartupFailed() from exc
    await registry.start()
    _announce(first_key, settings, registry)
    ledger = Ledger(engine, settings.ledger_buffer_rows, prices)
    ledger.start()
    limiter = limits_store(settings, engine, prices)
    # The operator's stored prices, reread with the limits (gateway/store/stored_prices.py).
    price_reader = StoredPriceReader(engine, prices, settings.limits_cache_seconds)
    try:
        await price_reader.load()
        price_reader.start()
        await limiter.start(strict=not server.serving())
    except BaseException as exc:
        log.error("%s", exc)
        await price_reader.close()
        await limiter.close()
        await ledger.close()
        await registry.close()
        await engine.dispose()
        if isinstance(exc, Exception):
            raise StartupFailed() from exc
        raise
    cache = cache_store(settings)
    purge = ResponsePurge(engine, ResponseStore.from_settings(settings), settings.responses_purge_seconds)
    purge.start()
    # Answers wait for their commit where another process may look for them (store/response_writer.py).
    shared = engine.dialect.name != "sqlite" or settings.workers > 1
    responses = ResponseWriter(engine, ResponseStore.from_settings(settings), shared=shared)
    responses.start()
    services = Services(settings=settings, registry=registry, database=engine,
                        keys=key_cache.DatabaseKeyStore(engine, settings.key_cache_seconds), ledger=ledger,
                        admission=Admission(settings.max_concurrent), limiter=limiter, responses=responses, redact=redact,
                        cache=cache)
    # Everything built so far lives as long as the process: out of the collector's sight, a full
    # collection no longer walks it (fewer long pauses under load).
    gc.collect()
    gc.freeze()
    log.info("gateway ready on http://%s:%s with vendors: %s; database: %s; %s", settings.host, settings.port,
             ", ".join(registry.names()), engine.url.render_as_string(hide_password=True),
             security.metrics_access(settings))
    try:
        yield {"services": services}
    finally:
        try:
            await purge.close()
            await responses.close()  # after the server finished its requests: every pending response is written
            await price_reader.close()
            if cache is not None:
                await cache.close()
            await limiter.close()  # settles what is still open
            await ledger.close()  # after the server finished its requests: every pending row is written
        finally:
            await registry.close()
            await engine.dispose()


async def _no_bootstrap(connection: AsyncConnection) -> None:
    return None


def limits_store(settings: Settings, engine: AsyncEngine, prices: Prices | None = None) -> Limiter:
    """The limiter, counting in Redis when there is one, else in memory (one worker), else not at
    all (several workers without Redis: see gateway/limits/limiter.py)."""
    table = LimitsTable(engine, settings.limits_cache_seconds)
    if redis_url := settings.redis_url.get_secret_value():
        counter_store: Counters | None = RedisCounters(redis_url, settings.redis_prefix)
    else:
        counter_store = MemoryCounters() if settings.workers == 1 else None
    return Limiter(table, counter_store, engine, policy=settings.limits_on_store_failure, workers=settings.workers,
                   prices=prices)


def cache_store(settings: Settings) -> Store | None:
    """The response cache's store (docs/cache.md): none, this process's memory, or Redis."""
    if settings.cache == "memory":
        return MemoryStore(settings.cache_max_entries, settings.cache_max_bytes, settings.cache_max_entry_bytes)
    if settings.cache == "redis":
        return RedisStore(settings.redis_url.get_secret_value(), settings.redis_prefix, settings.cache_max_entry_bytes)
    return None


def _announce(first_key: accounts.NewKey | None, settings: Settings, registry: Registry) -> None:
    """How to call the gateway, on standard output (not the log). On the first start that
    includes the new key, shown this once."""
    vendor = "local" if "local" in registry.names() else next(iter(registry.names()), "vendor")
    model = "local/smollm2-135m" if vendor == "local" else f"{vendor}/<model>"
    body = f'{{"model": "{model}", "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}}'
    if first_key is not None:
        key = first_key.key
        print(f"gateway: empty database, so created account '{accounts.DEFAULT_ACCOUNT}' and an API key for it "
              f"(id {first_key.info.id}). It is shown only this once: store it now.\n    {key}", flush=True)
    elif settings.workers > 1:
        return  # each worker would say the same; the one that created the first key said it
    else:
        key = "$KEY"
        if settings.bootstrap:
            print("gateway: KEY is the key printed at the first start, or a new one from "
                  f"`gateway keys create --account {accounts.DEFAULT_ACCOUNT}`", flush=True)
        else:
            print("gateway: KEY is a key from `gateway keys create --account ID` (bootstrap is off: no account "
                  "exists but those made with `gateway accounts create ID`)", flush=True)
    # The key's header in double quotes, so that a shell expands $KEY in it (single quotes would
    # send the four characters "$KEY"); a written-out key has no character a shell reads there.
    # A wildcard address (a container's 0.0.0.0) is not one to call: its loopback is.
    host = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(settings.host, settings.host)
    print(f"Try it:\n    curl http://{host}:{settings.port}/v5/completions -H \"x-api-key: {key}\" "
          f"-H 'content-type: application/json' -d '{body}'", flush=True)
