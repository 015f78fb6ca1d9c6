"""Configuration: one typed settings model, from an optional TOML file overridden by environment
variables.

Everything has a default that works on a fresh clone (the embedded `local` vendor on
127.0.0.1:8000). Vendor credentials are never written in the file: a vendor names the environment
variable that holds its key (`api_key_env`), so the file can be committed and shared.

    GATEWAY_CONFIG=gateway.toml          the file (optional)
    GATEWAY_<SETTING>                    any field of `Settings`, e.g. GATEWAY_PORT ([gateway] port)
    GATEWAY_VENDOR_<NAME>_<FIELD>        one vendor field, e.g. GATEWAY_VENDOR_VLLM_BASE_URL
    GATEWAY_FALLBACKS                    "vendor/model=vendor/other,vendor/third;..." ([fallbacks])
    GATEWAY_PRICES                       '{"vendor/model": {"input": 0.1, "output": 0.2}}' ([prices."vendor/model"])
    OPENAI_API_KEY [+ OPENAI_BASE_URL]   shortcut that configures the `openai` vendor
    ANTHROPIC_API_KEY [+ ANTHROPIC_BASE_URL]  ... the `anthropic` vendor (Messages API)
    GEMINI_API_KEY [+ GEMINI_BASE_URL]   ... the `gemini` vendor (generateContent)

Each setting is declared once, as a field below; its environment name derives from it. A vendor's
protocol-specific options are declared by its adapter (gateway/vendors/), which validates them;
the names they may take in the environment are given to `load` by the registry.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Collection, Mapping
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    SecretStr,
    ValidationError,
)

from gateway.core.errors import ConfigError

ENV_PREFIX = "GATEWAY_"
VENDOR_PREFIX = "GATEWAY_VENDOR_"


def split_names(value: Any) -> Any:
    """A list option: a TOML array, or a comma-separated string (from the environment)."""
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(items, list | tuple | set | frozenset):
        return frozenset(name for item in items if (name := str(item).strip()))
    return value


# A set of names, written as a TOML array or "a,b,c" in the environment.
Names = Annotated[frozenset[str], BeforeValidator(split_names)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Timeouts(_Frozen):
    """Seconds. `first_byte` bounds the wait for the vendor's answer to start, `idle` the gap
    between two stream chunks, `total` the whole vendor call."""

    connect: PositiveFloat = 5.0
    first_byte: PositiveFloat = 60.0
    idle: PositiveFloat = 30.0
    total: PositiveFloat = 600.0


class VendorConfig(_Frozen):
    name: str
    protocol: str  # which adapter speaks to it (gateway/vendors/registry.py)
    base_url: str = ""
    api_key: SecretStr = SecretStr("")  # resolved from api_key_env; never logged or shown
    timeouts: Timeouts = Timeouts()
    retries: NonNegativeInt = 2  # extra tries after a connection failure or a retryable status
    options: Mapping[str, Any] = Field(default_factory=dict)  # the protocol's own, validated by its adapter

    @property
    def secret(self) -> str:
        return self.api_key.get_secret_value()


# USD per million tokens. Six decimals at most: a price is then a whole number of pico-dollars per
# token, and a row's cost is exact before it is rounded to the nano-dollar (store/prices.py).
UsdPerMillion = Annotated[Decimal, Field(ge=0, decimal_places=6, allow_inf_nan=False)]


class PriceRates(_Frozen):
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


class Settings(_Frozen):
    """Every setting of the gateway. Secrets (vendor keys) are SecretStr: never in a repr or a dump."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    vendors: Mapping[str, VendorConfig] = Field(default_factory=dict)
    # model -> models to try, in order, when it fails in a way a retry could help (429, 5xx, timeout)
    fallbacks: Mapping[str, tuple[str, ...]] = Field(default_factory=dict)
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
    # Response validation against openapi.json: on in tests, off in production (it halves
    # throughput and turns every stream into a buffered body).
    validate_responses: bool = False
    # Which I/O the vendor HTTP clients use under httpx's API (see bench/).
    http_transport: Literal["aiohttp", "httpx"] = "aiohttp"
    log_level: Annotated[Literal["critical", "error", "warning", "info", "debug"],
                         BeforeValidator(lambda v: v.strip().lower() if isinstance(v, str) else v)] = "info"
    # Accounts, keys and the usage ledger. SQLite (a file, created on first start) suits one
    # gateway process; several processes or hosts share one PostgreSQL (postgresql://...).
    database_url: str = "sqlite:///var/gateway.db"
    # How long a key's lookup is trusted before the database is asked again: a revoked key keeps
    # working on a running gateway for at most this long.
    key_cache_seconds: NonNegativeFloat = 10.0
    # Ledger rows held in memory while the database cannot take them; beyond this, each further
    # row is logged in full (so it can be replayed) and dropped.
    ledger_buffer_rows: PositiveInt = 100_000


# Settings read from GATEWAY_<NAME> and the [gateway] table; vendors and fallbacks have their own forms.
SERVER_FIELDS = tuple(name for name in Settings.model_fields if name not in ("vendors", "fallbacks", "prices"))
# Fields every vendor has, whatever its protocol (api_key_env and enabled are read here, not kept).
VENDOR_FIELDS = ("protocol", "base_url", "api_key", "api_key_env", "enabled", "retries",
                 *Timeouts.model_fields)  # fmt: skip

# Protocols that one hosted service speaks: a vendor of that protocol defaults to its endpoint.
# (Not `openai`: a compatible server without a base_url is a mistake, not OpenAI.)
DEFAULT_BASE_URLS = {
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com/v1beta",
}
# <NAME>_API_KEY [+ <NAME>_BASE_URL] configures vendor <name> of protocol <name> at this URL.
_SHORTCUTS = {"openai": "https://api.openai.com/v1", **DEFAULT_BASE_URLS}


def load(env: Mapping[str, str] | None = None, vendor_options: Collection[str] | None = None) -> Settings:
    """The settings from GATEWAY_CONFIG's file and the environment (`env`, default os.environ).

    `vendor_options` are the protocol option names the adapters declare (the registry knows them):
    they are what GATEWAY_VENDOR_<NAME>_<OPTION> may name. None skips the vendors altogether, for
    tools that only need the server settings (the migrations' command line)."""
    env = os.environ if env is None else env
    path = env.get("GATEWAY_CONFIG")
    data = _read_toml(Path(path)) if path else {}
    server = dict(data.get("gateway", {}))
    unknown = set(server) - set(SERVER_FIELDS)
    if unknown:
        raise ConfigError(f"unknown [gateway] settings: {', '.join(sorted(unknown))} "
                          f"(known: {', '.join(SERVER_FIELDS)})")
    for name in SERVER_FIELDS:
        if (var := ENV_PREFIX + name.upper()) in env:
            server[name] = env[var]
    vendors = {} if vendor_options is None else _vendors(data.get("vendors", {}), env, vendor_options)
    try:
        return Settings.model_validate({**server, "vendors": vendors, "fallbacks": _fallbacks(data, env),
                                        "prices": env.get("GATEWAY_PRICES") or data.get("prices", {})})
    except ValidationError as exc:
        raise ConfigError(describe(exc, _setting_name)) from None


def describe(exc: ValidationError, name: Any = ".".join) -> str:
    """A pydantic error as one line per problem, each named the way the user wrote it."""
    return "; ".join(f"{name(tuple(str(part) for part in e['loc']))}: {e['msg']}" for e in exc.errors())


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
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc


def _fallbacks(data: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """`[fallbacks]` table ("vendor/model" = ["vendor/other", ...]) and/or
    GATEWAY_FALLBACKS="vendor/model=vendor/other,vendor/third;vendor/x=vendor/y"."""
    chains = {model: tuple(chain) for model, chain in data.get("fallbacks", {}).items()}
    for entry in filter(None, (part.strip() for part in env.get("GATEWAY_FALLBACKS", "").split(";"))):
        model, _, chain = entry.partition("=")
        chains[model.strip()] = tuple(m.strip() for m in chain.split(",") if m.strip())
    for model, chain in chains.items():
        if "/" not in model or not chain or any("/" not in m for m in chain):
            raise ConfigError(f"fallbacks: {model!r} -> {list(chain)!r}: models are written vendor/name")
    return chains


def _vendors(table: Mapping[str, Any], env: Mapping[str, str], options: Collection[str]) -> dict[str, VendorConfig]:
    raw: dict[str, dict[str, Any]] = {
        "local": {"protocol": "local"},  # the embedded model: on unless disabled
    }
    for name, base_url in _SHORTCUTS.items():
        key_env = f"{name.upper()}_API_KEY"
        if env.get(key_env):
            raw[name] = {
                "protocol": name,
                "base_url": env.get(f"{name.upper()}_BASE_URL", base_url),
                "api_key_env": key_env,
            }
    for name, values in table.items():
        if "api_key" in values:
            raise ConfigError(f"vendor {name!r}: put the key in an environment variable and name it in api_key_env")
        raw.setdefault(name.lower(), {}).update(values)
    # The longest matching field wins, so vendor names may contain underscores
    # (GATEWAY_VENDOR_MY_VLLM_BASE_URL is vendor "my_vllm").
    fields = sorted({*VENDOR_FIELDS, *options}, key=len, reverse=True)
    for var, value in env.items():
        if not var.startswith(VENDOR_PREFIX):
            continue
        rest = var[len(VENDOR_PREFIX):]
        for name_field in fields:
            suffix = "_" + name_field.upper()
            if rest.endswith(suffix) and len(rest) > len(suffix):
                raw.setdefault(rest[: -len(suffix)].lower(), {})[name_field] = value
                break
        else:
            raise ConfigError(f"{var}: unknown vendor setting (known: {', '.join(sorted(fields))})")
    return {name: vendor for name, values in raw.items() if (vendor := _vendor(name, dict(values), env))}


def _vendor(name: str, values: dict[str, Any], env: Mapping[str, str]) -> VendorConfig | None:
    try:
        enabled = _Switch.model_validate({"on": values.pop("enabled", True)}).on
    except ValidationError as exc:
        raise ConfigError(f"vendor {name!r} enabled: {exc.errors()[0]['msg']}") from None
    if not enabled:
        return None
    protocol = values.pop("protocol", None)
    if not protocol:
        raise ConfigError(f"vendor {name!r} needs a protocol (openai, anthropic, gemini, local)")
    key_env = values.pop("api_key_env", None)
    api_key = values.pop("api_key", "") or (env.get(key_env, "") if key_env else "")
    if key_env and not api_key:
        raise ConfigError(f"vendor {name!r}: environment variable {key_env} is not set")
    timeouts = dict(values.pop("timeouts", {}))
    for name_field in set(Timeouts.model_fields) & set(values):
        timeouts[name_field] = values.pop(name_field)
    base_url = str(values.pop("base_url", "") or DEFAULT_BASE_URLS.get(protocol, "")).rstrip("/")
    common = {"name": name, "protocol": protocol, "base_url": base_url, "api_key": api_key, "timeouts": timeouts}
    if "retries" in values:
        common["retries"] = values.pop("retries")
    try:
        return VendorConfig.model_validate(common | {"options": values})
    except ValidationError as exc:
        raise ConfigError(f"vendor {name!r}: {describe(exc)}") from None


class _Switch(BaseModel):
    on: bool
