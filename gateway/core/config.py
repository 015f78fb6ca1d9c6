"""Configuration: one typed settings model, from an optional TOML file overridden by environment
variables.

Everything has a default that works on a fresh clone (the embedded `local` vendor on
127.0.0.1:8000). Vendor credentials are never written in the file: a vendor names the environment
variable that holds its key (`api_key_env`), so the file can be committed and shared.

    GATEWAY_CONFIG=gateway.toml          the file (optional)
    GATEWAY_<SETTING>                    any field of `Settings`, e.g. GATEWAY_PORT ([gateway] port)
    GATEWAY_VENDOR_<NAME>_<FIELD>        one vendor field, e.g. GATEWAY_VENDOR_VLLM_BASE_URL
                                         (DEPLOYMENTS takes the TOML array as JSON)
    GATEWAY_FALLBACKS                    "vendor/model=vendor/other,vendor/third;..." ([fallbacks])
    GATEWAY_ALIASES                      "name=vendor/model;..." ([aliases]: bare names clients may use)
    GATEWAY_PRICES                       '{"vendor/model": {"input": 0.1, "output": 0.2}}' ([prices."vendor/model"])
    <PROTOCOL>_API_KEY [+ <PROTOCOL>_BASE_URL]
                                         for a protocol named after a hosted service (its adapter
                                         says which: OPENAI_, ANTHROPIC_, GEMINI_), a vendor of that
                                         name at the service's endpoint

Each setting is declared once, as a field below; its environment name derives from it. A vendor's
protocol-specific options are declared by its adapter (gateway/vendors/), which validates them;
the registry gives `load` what each protocol declares (`Protocol`): its option names and endpoints.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    SecretStr,
    ValidationError,
)

from gateway.core.errors import ConfigError
from gateway.core.model_names import check_aliases, check_fallbacks, read_aliases, read_fallbacks

# The vendors' part of the settings has its own module; these names are part of this one's surface.
from gateway.core.vendor_config import (  # noqa: F401
    VENDOR_PREFIX,
    Deployment,
    Frozen,
    Health,
    Names,
    Protocol,
    Routing,
    Timeouts,
    VendorConfig,
    describe,
    load_vendors,
    split_names,
)

ENV_PREFIX = "GATEWAY_"


def _origins(origins: frozenset[str]) -> frozenset[str]:
    for origin in origins:
        if origin != "*" and not re.fullmatch(r"https?://[^/\s]+", origin):
            raise ValueError(f"{origin!r} is not an origin: scheme://host[:port] with no path (or *)")
    return origins


# Web origins allowed to call the API from a browser (CORS), e.g. "https://app.example.com".
Origins = Annotated[Names, AfterValidator(_origins)]


# USD per million tokens. Six decimals at most: a price is then a whole number of pico-dollars per
# token, and a row's cost is exact before it is rounded to the nano-dollar (store/prices.py).
UsdPerMillion = Annotated[Decimal, Field(ge=0, decimal_places=6, allow_inf_nan=False)]


class PriceRates(Frozen):
    input: UsdPerMillion  # prompt tokens
    output: UsdPerMillion  # completion tokens (thinking included)
    cached_input: UsdPerMillion | None = None  # prompt tokens served from the vendor's cache; default `input`
    cache_write: UsdPerMillion | None = None  # prompt tokens written to the vendor's cache; default `input`


class LongPrompt(PriceRates):
    """The rates of every token of a vendor call whose prompt has more than `above` tokens."""

    above: PositiveInt


class PriceConfig(PriceRates):
    """One model's price, `[prices."vendor/model"]` (or several, `[[prices."vendor/model"]]`, each
    with its own `since`). A model configured here takes no price from the packaged table."""

    since: date | datetime | None = None  # when it takes effect (a date is UTC midnight); default: always
    long_prompt: LongPrompt | None = None


def price_list(value: Any) -> Any:
    """One price table or an array of them (TOML), or the JSON of GATEWAY_PRICES."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
    return value


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, Mapping) else value


Prices = Annotated[Mapping[str, Annotated[tuple[PriceConfig, ...], BeforeValidator(_one_or_many)]],
                   BeforeValidator(price_list)]


class Settings(Frozen):
    """Every setting of the gateway. Secrets (vendor keys) are SecretStr: never in a repr or a dump."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    vendors: Mapping[str, VendorConfig] = Field(default_factory=dict)
    # model -> models to try, in order, when it fails in a way a retry could help (429, 5xx, timeout)
    fallbacks: Mapping[str, tuple[str, ...]] = Field(default_factory=dict)
    # alias -> the "vendor/model" it stands for (core/model_names.py)
    aliases: Mapping[str, str] = Field(default_factory=dict)
    # "vendor/model" -> its price(s), adding to or overriding the packaged table (store/prices.toml)
    prices: Prices = Field(default_factory=dict)
    max_body_bytes: PositiveInt = 1 << 20
    max_concurrent: PositiveInt = 1024  # completions in flight per process (planner/admission.py)
    max_vendor_calls: PositiveInt = 256  # vendor calls one request may fan out to (planner/plan.py)
    body_timeout: PositiveFloat = 30.0  # seconds for a client to send its request body (then 408)
    send_timeout: PositiveFloat = 60.0  # seconds a stream waits for a client that does not read (then dropped)
    header_timeout: PositiveFloat = 15.0  # seconds for a new connection to send its request headers
    # Bytes of one request's head (request line and headers); beyond it, 431 and the connection closed.
    max_header_bytes: PositiveInt = 64 << 10
    # Seconds a connection may stay open with no request in progress (an idle keep-alive connection, or
    # one still trickling the unread body of a request already answered); then it is closed.
    keep_alive_timeout: PositiveFloat = 5.0
    # Seconds SIGTERM gives requests in flight to finish; a request still waiting for its vendor then
    # is answered 503 (a stream ends with an error event).
    shutdown_timeout: PositiveFloat = 30.0
    # Response validation against openapi.json: on in tests, off in production (it costs much of
    # the throughput, and turns every stream into a buffered body).
    validate_responses: bool = False
    log_level: Annotated[Literal["critical", "error", "warning", "info", "debug"],
                         BeforeValidator(lambda v: v.strip().lower() if isinstance(v, str) else v)] = "info"
    # Accounts, keys and the usage ledger. SQLite (a file, created on first start) suits one
    # gateway process; several processes or hosts share one PostgreSQL (postgresql://...). Secret:
    # a PostgreSQL URL may hold a password.
    database_url: SecretStr = SecretStr("sqlite:///var/gateway.db")
    # On an empty database, create the `default` account and a key for it, printed once, so that a
    # fresh clone works. Off in production (the image): only the keys an operator creates exist.
    bootstrap: bool = True
    # How long a key's lookup is trusted before the database is asked again: a revoked key keeps
    # working on a running gateway for at most this long.
    key_cache_seconds: NonNegativeFloat = 10.0
    # Ledger rows held in memory while the database cannot take them; beyond this, each further
    # row is logged in full (so it can be replayed) and dropped.
    ledger_buffer_rows: PositiveInt = 100_000
    # Processes serving the one port (`gateway serve --workers N`), sharing the database.
    workers: PositiveInt = 1
    # Per-key and per-account limits (gateway/limits/): with a Redis URL their counters live
    # there, shared exactly by every worker and host; without one, in this process's memory.
    redis_url: SecretStr = SecretStr("")  # secret: the URL may hold a password
    redis_prefix: str = "gateway:"  # of every Redis key the gateway writes
    # What a request under limits gets while Redis cannot be reached: `open` serves it uncounted,
    # `closed` refuses it (503). Either way it is logged and /readyz says degraded.
    limits_on_store_failure: Literal["open", "closed"] = "open"
    # How long a running gateway keeps its copy of the limits table: a change is seen within it.
    limits_cache_seconds: PositiveFloat = 10.0
    # Operating it (README, "Operating it"): logs, metrics, traces, the docs page, CORS.
    log_format: Literal["text", "json"] = "text"
    metrics: bool = True  # GET /metrics and the counting behind it
    metrics_key: SecretStr = SecretStr("")  # a secret a scraper sends; when set, /metrics needs a key
    metrics_api_keys: bool = False  # a gateway API key may scrape /metrics (and then one is needed)
    # Where the processes of one `gateway serve` share their counts; wiped at start. Empty: a new
    # private directory (PROMETHEUS_MULTIPROC_DIR, when set, wins and is left as it is).
    metrics_dir: str = ""
    # Distinct model label values per vendor and process; past it, "other" (clients choose models).
    metrics_models_per_vendor: PositiveInt = 32
    # The response cache (docs/cache.md): exact answers of deterministic requests served again,
    # from this process's memory or from Redis (GATEWAY_REDIS_URL, shared by every worker and host).
    cache: Literal["off", "memory", "redis"] = "off"
    cache_ttl_seconds: PositiveFloat = 3600.0  # an entry's life; a request may ask less or more (x-gateway-cache-ttl)
    cache_max_entries: PositiveInt = 10_000  # the memory cache's bound (per process)
    cache_max_bytes: PositiveInt = 256 << 20  # the memory cache's bound in bytes (per process)
    cache_max_entry_bytes: PositiveInt = 1 << 20  # one entry's bound, either store: a larger answer is not kept
    # What a hit is billed, as a share of what its tokens cost at the model's price (0: free).
    cache_hit_price: Annotated[float, Field(ge=0, le=1)] = 0.0
    # Stored responses (POST /v5/responses with `store`, docs/responses.md): an account's inputs and
    # outputs, kept this many days from their creation, then answered as not found and purged.
    responses_retention_days: PositiveInt = 30
    responses_purge_seconds: PositiveFloat = 3600.0  # how often the expired ones are removed
    # Responses a `previous_response_id` chain may hold, and the bytes of their items together:
    # rebuilding a conversation reads all of it into memory, so both are bounded (a 400 beyond).
    responses_max_chain: PositiveInt = 256
    responses_max_chain_bytes: PositiveInt = 32 << 20
    trace_content: bool = False  # prompts and completions in trace spans (off: they may be personal data)
    cors_origins: Origins = frozenset()  # none: no browser page of another origin may call the API
    docs: bool = True  # the interactive API page at /docs/


# Settings read from GATEWAY_<NAME> and the [gateway] table; vendors, fallbacks... have their own forms.
SERVER_FIELDS = tuple(name for name in Settings.model_fields
                      if name not in ("vendors", "fallbacks", "aliases", "prices"))


# The file's tables; any other is a startup error (a misspelled table would be ignored silently).
TABLES = ("gateway", "vendors", "fallbacks", "aliases", "prices")
# Variables of the gateway's name that are read elsewhere: besides these, a GATEWAY_ variable that
# names no setting is a startup error. GATEWAY_TEST_* belong to the tests and tools (tests/, bench/).
OTHER_VARIABLES = ("GATEWAY_CONFIG", "GATEWAY_FALLBACKS", "GATEWAY_ALIASES", "GATEWAY_PRICES")
TEST_PREFIX = "GATEWAY_TEST_"

# Settings that were removed, and why: set, they are a startup error rather than ignored.
REMOVED = {
    "GATEWAY_HTTP_TRANSPORT": "vendors are called through the gateway's own HTTP/1.1 client only (aiohttp's and "
                              "httpx's were removed); unset it",
}


def load(env: Mapping[str, str] | None = None, protocols: Mapping[str, Protocol] | None = None) -> Settings:
    """The settings from GATEWAY_CONFIG's file and the environment (`env`, default os.environ).

    `protocols` are the vendor protocols the adapters declare (the registry knows them): their
    option names are what GATEWAY_VENDOR_<NAME>_<OPTION> may name. None skips the vendors
    altogether, for tools that only need the server settings (the migrations' command line)."""
    env = os.environ if env is None else env
    for var, why in REMOVED.items():
        if var in env:
            raise ConfigError(f"{var} is no longer a setting: {why}")
    _check_variables(env)
    path = env.get("GATEWAY_CONFIG")
    data = _read_toml(Path(path)) if path else {}
    _check_tables(data)
    server = dict(data.get("gateway", {}))
    unknown = set(server) - set(SERVER_FIELDS)
    if unknown:
        raise ConfigError(f"unknown [gateway] settings: {', '.join(sorted(unknown))} "
                          f"(known: {', '.join(SERVER_FIELDS)})")
    for name in SERVER_FIELDS:
        if (var := ENV_PREFIX + name.upper()) in env:
            server[name] = env[var]
    vendors = {} if protocols is None else load_vendors(data.get("vendors", {}), env, protocols)
    fallbacks, aliases = read_fallbacks(data, env), read_aliases(data, env)
    if protocols is not None:
        check_fallbacks(fallbacks, vendors)
        check_aliases(aliases, vendors)
    try:
        settings = Settings.model_validate({**server, "vendors": vendors, "fallbacks": fallbacks,
                                            "aliases": aliases,
                                            "prices": env.get("GATEWAY_PRICES") or data.get("prices", {})})
    except ValidationError as exc:
        raise ConfigError(describe(exc, _setting_name)) from None
    if settings.cache == "redis" and not settings.redis_url.get_secret_value():
        raise ConfigError("GATEWAY_CACHE=redis keeps the response cache in the Redis of GATEWAY_REDIS_URL: set it "
                          "(or GATEWAY_CACHE=memory)")
    return settings


def suggestion(var: str) -> str:
    """", if you meant GATEWAY_X" for a stray variable close to a setting, else ""."""
    settings = {known.removeprefix(ENV_PREFIX): known for known in _known_variables()}
    close = difflib.get_close_matches(var.removeprefix(ENV_PREFIX), sorted(settings), n=1, cutoff=0.7)
    return f", if you meant {settings[close[0]]}" if close else ""


def _suggest(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _check_variables(env: Mapping[str, str]) -> None:
    """A GATEWAY_ variable that is a misspelt setting (`misspelt`) is refused: the setting it
    meant would silently keep its default. The others are not the gateway's to refuse (a launcher
    that exports GATEWAY_URL for itself, the links of a Kubernetes Service named `gateway`):
    `stray_variables` names them, and the CLI warns of each."""
    for var in stray_variables(env):
        meant = misspelt(var)
        if meant is not None:
            raise ConfigError(f"{var}: no such setting (did you mean {meant}?) (the settings: README.md, "
                              "\"Configuration\")")


def misspelt(var: str) -> str | None:
    """The setting `var` misspells, if it is one: a letter or two wrong, missing, extra or swapped
    (one in a name of five letters or fewer: GATEWAY_HOME is not GATEWAY_HOST), or some of a
    setting's words in its order, two or more (GATEWAY_LIMITS_STORE_FAILURE)."""
    name = var.removeprefix(ENV_PREFIX)
    words = name.split("_")
    for known in sorted(_known_variables()):
        setting = known.removeprefix(ENV_PREFIX)
        if _typos(name, setting) <= (1 if len(name) <= 5 else 2):
            return known
        if len(words) >= 2 and _in_order(words, setting.split("_")):
            return known
    return None


def _in_order(words: list[str], of: list[str]) -> bool:
    rest = iter(of)
    return all(word in rest for word in words)


def stray_variables(env: Mapping[str, str]) -> list[str]:
    """The GATEWAY_ variables of `env` that name no setting (the tests' and vendors' aside)."""
    known = _known_variables()
    return [var for var in sorted(env) if var.startswith(ENV_PREFIX) and var not in known
            and not var.startswith(TEST_PREFIX)
            and not var.startswith(VENDOR_PREFIX)]  # a vendor's: load_vendors knows its fields


def _known_variables() -> set[str]:
    return {ENV_PREFIX + name.upper() for name in SERVER_FIELDS} | set(OTHER_VARIABLES)


def _typos(a: str, b: str) -> int:
    """Edits from `a` to `b`, a swap of two neighbours counting as one (optimal string alignment)."""
    before: list[int] = []
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        earlier, before, row = before, row, [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            row[j] = min(before[j] + 1, row[j - 1] + 1, before[j - 1] + (x != y))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                row[j] = min(row[j], earlier[j - 2] + 1)
    return row[-1]


def _check_tables(data: Mapping[str, Any]) -> None:
    for table in data:
        if table not in TABLES:
            raise ConfigError(f"[{table}]: no such table in the config file{_suggest(table, TABLES)} "
                              f"(the tables: {', '.join(TABLES)})")
        if not isinstance(data[table], Mapping):
            raise ConfigError(f"{table}: a table ([{table}]), not a {type(data[table]).__name__}")


def _setting_name(loc: tuple[str, ...]) -> str:
    if loc[0] == "vendors" and len(loc) > 1:
        return f"vendor {loc[1]!r} {'.'.join(loc[2:])}"
    if loc[0] in SERVER_FIELDS:
        return f"{ENV_PREFIX}{loc[0].upper()} ([gateway] {loc[0]})"
    if loc[0] == "prices" and len(loc) > 1:
        return f"price of {loc[1]!r} {'.'.join(part for part in loc[2:] if not part.isdigit())}".rstrip()
    return ".".join(loc)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read config file {path}: not UTF-8 text (byte {exc.start}); a TOML file "
                          "is expected") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
