"""Configuration: an optional TOML file, overridden by environment variables.

Everything has a default that works on a fresh clone (the embedded `local` vendor on 127.0.0.1:8000).
Vendor credentials are never written in the file: a vendor names the environment variable that
holds its key (`api_key_env`), so the file can be committed and shared.

    GATEWAY_CONFIG=gateway.toml          the file (optional)
    GATEWAY_HOST / GATEWAY_PORT          listen address (127.0.0.1:8000)
    GATEWAY_DATABASE_URL                 accounts, keys and the usage ledger (sqlite:///var/gateway.db)
    GATEWAY_VENDOR_<NAME>_<FIELD>        one vendor field, e.g. GATEWAY_VENDOR_VLLM_BASE_URL
    OPENAI_API_KEY [+ OPENAI_BASE_URL]   shortcut that configures the `openai` vendor
    ANTHROPIC_API_KEY [+ ANTHROPIC_BASE_URL]  ... the `anthropic` vendor (Messages API)
    GEMINI_API_KEY [+ GEMINI_BASE_URL]   ... the `gemini` vendor (generateContent)

See README.md ("Configuration") for every setting.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds. `first_byte` bounds the wait for the vendor's answer to start, `idle` the gap
    between two stream chunks, `total` the whole vendor call."""

    connect: float = 5.0
    first_byte: float = 60.0
    idle: float = 30.0
    total: float = 600.0


@dataclass(frozen=True, slots=True)
class VendorConfig:
    name: str
    protocol: str  # which adapter speaks to it: openai | local | ...
    base_url: str = ""
    api_key: str = field(default="", repr=False)  # resolved from api_key_env; never logged
    timeouts: Timeouts = Timeouts()
    retries: int = 2  # extra tries after a connection failure or a retryable status (vendors/http.py)
    options: Mapping[str, Any] = field(default_factory=dict)  # protocol-specific (model_path, ...)

    def option_names(self, key: str) -> frozenset[str]:
        """A list option: a TOML array, or a comma-separated string (from the environment)."""
        value = self.options.get(key, ())
        items = value.split(",") if isinstance(value, str) else value
        return frozenset(name for item in items if (name := str(item).strip()))

    def option_int(self, key: str, default: int | None, minimum: int = 0) -> int | None:
        value = self.options.get(key)
        if value is None:
            return default
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = minimum - 1
        if number < minimum or isinstance(value, bool):
            raise ConfigError(f"vendor {self.name!r}: {key} must be an integer of at least {minimum}, not {value!r}")
        return number

    def option_choice(self, key: str, choices: tuple[str, ...]) -> str:
        """One of `choices`; the first is the default."""
        value = str(self.options.get(key, choices[0])).strip().lower()
        if value not in choices:
            raise ConfigError(f"vendor {self.name!r}: {key} must be one of {', '.join(choices)}, not {value!r}")
        return value


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    vendors: Mapping[str, VendorConfig] = field(default_factory=dict)
    # model -> models to try, in order, when it fails in a way a retry could help (429, 5xx, timeout)
    fallbacks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    max_body_bytes: int = 1 << 20
    max_concurrent: int = 1024  # completions in flight per process (gateway/limits.py)
    max_vendor_calls: int = 256  # vendor calls one request may fan out to (gateway/planning.py)
    body_timeout: float = 30.0  # seconds for a client to send its request body (then 408)
    send_timeout: float = 60.0  # seconds a stream waits for a client that does not read (then it is dropped)
    header_timeout: float = 15.0  # seconds for a new connection to send its request headers
    # Response validation against openapi.json: on in tests, off in production (it halves
    # throughput and turns every stream into a buffered body).
    validate_responses: bool = False
    # Which I/O the vendor HTTP clients use under httpx's API: "aiohttp" or "httpx" (see bench/).
    http_transport: str = "aiohttp"
    log_level: str = "info"
    # Accounts, keys and the usage ledger. SQLite (a file, created on first start) suits one
    # gateway process; several processes or hosts share one PostgreSQL (postgresql://...).
    database_url: str = "sqlite:///var/gateway.db"
    # How long a key's lookup is trusted before the database is asked again: a revoked key keeps
    # working on a running gateway for at most this long.
    key_cache_seconds: float = 10.0
    # Ledger rows held in memory while the database cannot take them; beyond this, each further
    # row is logged in full (so it can be replayed) and dropped.
    ledger_buffer_rows: int = 100_000

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        path = env.get("GATEWAY_CONFIG")
        data = _read_toml(Path(path)) if path else {}
        return _build(data, env)


_TIMEOUT_FIELDS = tuple(f.name for f in dataclasses.fields(Timeouts))
# Settable per vendor as GATEWAY_VENDOR_<NAME>_<FIELD>; the longest matching field wins, so vendor
# names may contain underscores (GATEWAY_VENDOR_MY_VLLM_BASE_URL is vendor "my_vllm").
_ENV_FIELDS = sorted(
    ("protocol", "base_url", "api_key", "api_key_env", "enabled", "retries", "model_path", "threads", "parallel",
     "context_size", *_TIMEOUT_FIELDS,
     # vendors/openai.py, vendors/anthropic.py, vendors/gemini.py
     "lacks", "max_stop", "prompt_as", "user_turn_models", "max_candidates"),
    key=len,
    reverse=True,
)


# Protocols that one hosted service speaks: a vendor of that protocol defaults to its endpoint.
# (Not `openai`: a compatible server without a base_url is a mistake, not OpenAI.)
DEFAULT_BASE_URLS = {
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com/v1beta",
}
# <NAME>_API_KEY [+ <NAME>_BASE_URL] configures vendor <name> of protocol <name> at this URL.
_SHORTCUTS = {"openai": "https://api.openai.com/v1", **DEFAULT_BASE_URLS}


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc


def _build(data: Mapping[str, Any], env: Mapping[str, str]) -> Settings:
    server = dict(data.get("gateway", {}))
    for key, var, kind in (
        ("host", "GATEWAY_HOST", str),
        ("port", "GATEWAY_PORT", int),
        ("max_body_bytes", "GATEWAY_MAX_BODY_BYTES", int),
        ("max_concurrent", "GATEWAY_MAX_CONCURRENT", int),
        ("max_vendor_calls", "GATEWAY_MAX_VENDOR_CALLS", int),
        ("body_timeout", "GATEWAY_BODY_TIMEOUT", float),
        ("send_timeout", "GATEWAY_SEND_TIMEOUT", float),
        ("header_timeout", "GATEWAY_HEADER_TIMEOUT", float),
        ("validate_responses", "GATEWAY_VALIDATE_RESPONSES", _boolean),
        ("http_transport", "GATEWAY_HTTP_TRANSPORT", str),
        ("log_level", "GATEWAY_LOG_LEVEL", str),
        ("database_url", "GATEWAY_DATABASE_URL", str),
        ("key_cache_seconds", "GATEWAY_KEY_CACHE_SECONDS", float),
        ("ledger_buffer_rows", "GATEWAY_LEDGER_BUFFER_ROWS", int),
    ):
        if var in env:
            server[key] = _convert(var, env[var], kind)
    known = {f.name for f in dataclasses.fields(Settings)} - {"vendors", "fallbacks"}
    unknown = set(server) - known
    if unknown:
        raise ConfigError(f"unknown [gateway] settings: {', '.join(sorted(unknown))}")
    if server.get("http_transport", "aiohttp") not in ("aiohttp", "httpx"):
        raise ConfigError("http_transport must be 'aiohttp' or 'httpx'")
    return Settings(vendors=_vendors(data.get("vendors", {}), env), fallbacks=_fallbacks(data, env), **server)


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


def _vendors(table: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, VendorConfig]:
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
    prefix = "GATEWAY_VENDOR_"
    for var, value in env.items():
        if not var.startswith(prefix):
            continue
        rest = var[len(prefix) :]
        for name_field in _ENV_FIELDS:
            suffix = "_" + name_field.upper()
            if rest.endswith(suffix) and len(rest) > len(suffix):
                raw.setdefault(rest[: -len(suffix)].lower(), {})[name_field] = value
                break
        else:
            raise ConfigError(f"{var}: unknown vendor setting (known: {', '.join(sorted(_ENV_FIELDS))})")
    return {name: vendor for name, values in raw.items() if (vendor := _vendor(name, dict(values), env))}


def _vendor(name: str, values: dict[str, Any], env: Mapping[str, str]) -> VendorConfig | None:
    if not _boolean(str(values.pop("enabled", "true"))):
        return None
    protocol = values.pop("protocol", None)
    if not protocol:
        raise ConfigError(f"vendor {name!r} needs a protocol (openai, local, ...)")
    key_env = values.pop("api_key_env", None)
    api_key = values.pop("api_key", "") or (env.get(key_env, "") if key_env else "")
    if key_env and not api_key:
        raise ConfigError(f"vendor {name!r}: environment variable {key_env} is not set")
    timeouts = dict(values.pop("timeouts", {}))
    for name_field in set(_TIMEOUT_FIELDS) & set(values):
        timeouts[name_field] = values.pop(name_field)
    try:
        parsed = Timeouts(**{k: float(v) for k, v in timeouts.items()})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"vendor {name!r}: bad timeouts: {exc}") from exc
    base_url = str(values.pop("base_url", "") or DEFAULT_BASE_URLS.get(protocol, "")).rstrip("/")
    retries = _convert(f"vendor {name!r} retries", values.pop("retries", 2), int)
    if retries < 0:
        raise ConfigError(f"vendor {name!r}: retries must be >= 0")
    return VendorConfig(name, protocol, base_url, api_key, parsed, retries, values)


def _boolean(value: str) -> bool:
    lowered = str(value).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"not a boolean: {value!r}")


def _convert(var: str, value: str, kind: Any) -> Any:
    try:
        return kind(value)
    except (ValueError, ConfigError) as exc:
        raise ConfigError(f"{var}={value!r}: {exc}") from exc
