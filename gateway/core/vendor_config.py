"""The vendors' part of the settings (gateway/core/config.py): what a vendor is (`VendorConfig`: its
protocol, one deployment or several, timeouts, retries, passive health, the protocol's own options)
and how `[vendors.<name>]` tables, GATEWAY_VENDOR_<NAME>_<FIELD> variables and the hosted services'
<PROTOCOL>_API_KEY shortcuts become them. What a protocol brings (its option names, its endpoints)
comes from its adapter, through the registry (`Protocol`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from gateway.core.errors import ConfigError

VENDOR_PREFIX = "GATEWAY_VENDOR_"
# A vendor's name is the first part of "vendor/model", a metrics label and part of variable names.
VENDOR_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def _http_url(url: str) -> str:
    """A vendor's address: http(s)://host[:port][/path], the only ones its HTTP client speaks."""
    if url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
            raise ValueError(f"{url!r} is not an http:// or https:// URL with a host")
    return url


def split_names(value: Any) -> Any:
    """A list option: a TOML array, or a comma-separated string (from the environment)."""
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(items, list | tuple | set | frozenset):
        return frozenset(name for item in items if (name := str(item).strip()))
    return value


# A set of names, written as a TOML array or "a,b,c" in the environment.
Names = Annotated[frozenset[str], BeforeValidator(split_names)]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Timeouts(Frozen):
    """Seconds. `first_byte` bounds the wait for the vendor's answer to start (a stream's first
    chunk, and a non-streamed answer's head, which comes with the whole answer), `idle` the gap
    between two stream chunks, `total` the whole vendor call."""

    connect: PositiveFloat = 5.0
    first_byte: PositiveFloat = 60.0
    idle: PositiveFloat = 30.0
    total: PositiveFloat = 600.0


class Health(Frozen):
    """Passive health of a vendor's deployments (gateway/vendors/transport/balancer.py): `eject_after`
    consecutive failures (connection failures, timeouts, 5xx, answers that are not answers, calls
    given up on unanswered) take a deployment out for `cooldown` seconds, doubled at each
    ejection in a row up to `max_cooldown`."""

    eject_after: PositiveInt = 3
    cooldown: PositiveFloat = 5.0
    max_cooldown: PositiveFloat = 300.0

    @model_validator(mode="after")
    def _ordered(self) -> Health:
        if self.cooldown > self.max_cooldown:
            raise ValueError(f"cooldown ({self.cooldown}) is longer than max_cooldown ({self.max_cooldown})")
        return self


HttpUrl = Annotated[str, AfterValidator(_http_url)]


# How a vendor with several deployments picks the one for each try (gateway/vendors/transport/balancer.py).
Routing = Literal["least_outstanding", "weighted_random", "p2c_ewma"]


class Deployment(Frozen):
    """One place that serves a vendor: its URL and key, its share of the traffic, how many calls it
    may have in flight. `name` is what the ledger and GET /v5/vendors call it (default: its index)."""

    base_url: HttpUrl
    api_key: SecretStr = SecretStr("")  # resolved from api_key_env; never logged or shown
    name: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    weight: PositiveFloat = 1.0
    max_concurrent: PositiveInt | None = None
    # Its own proxy and CA file, before the vendor's (VendorConfig.proxy, ca_file).
    proxy: SecretStr | None = None
    ca_file: str | None = None

    @field_validator("name")
    @classmethod
    def _printable(cls, name: str | None) -> str | None:
        # A fanned-out request's ledger row lists the names that served it, comma-separated.
        if name is not None and not all("!" <= c <= "~" and c != "," for c in name):
            raise ValueError("a deployment name is printable ASCII without spaces or commas")
        return name

    @property
    def secret(self) -> str:
        return self.api_key.get_secret_value()


class VendorConfig(Frozen):
    name: str
    protocol: str  # which adapter speaks to it (gateway/vendors/registry.py)
    # One deployment (base_url and api_key), or several (`deployments`); one of the two forms.
    base_url: HttpUrl = ""
    api_key: SecretStr = SecretStr("")  # resolved from api_key_env; never logged or shown
    deployments: tuple[Deployment, ...] = ()
    routing: Routing = "least_outstanding"
    health: Health = Health()
    timeouts: Timeouts = Timeouts()
    retries: NonNegativeInt = 2  # extra tries after a connection failure or a retryable status
    options: Mapping[str, Any] = Field(default_factory=dict)  # the protocol's own, validated by its adapter
    # The proxy its connections go through (http://[user:password@]host[:port]; "" or "none": none,
    # whatever HTTPS_PROXY says; unset: the environment's, gateway/vendors/transport/proxies.py). A secret: the
    # URL may hold a password.
    proxy: SecretStr | None = None
    ca_file: str = ""  # PEM file of the CAs its TLS certificates are checked against (default: the system's)

    @model_validator(mode="after")
    def _one_form(self) -> VendorConfig:
        if self.deployments and (self.base_url or self.secret):
            raise ValueError("give either base_url (and its key) or deployments, not both")
        names = [d.name for d in self.deployments if d.name is not None]
        if len(set(names)) != len(names):
            raise ValueError(f"deployment names must differ: {names}")
        return self

    @property
    def targets(self) -> tuple[Deployment, ...]:
        """The deployments the vendor is served from: `deployments`, or the one of the
        single-deployment form (base_url and key) as a list of one."""
        return self.deployments or (Deployment(base_url=self.base_url, api_key=self.api_key),)

    @property
    def secret(self) -> str:
        return self.api_key.get_secret_value()

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every key the vendor's deployments use, and their proxies' URLs and passwords (what a
        vendor's text is scrubbed of)."""
        proxies = [self.proxy, *(d.proxy for d in self.deployments)]
        found = [d.secret for d in self.targets]
        for proxy in proxies:
            if proxy is not None and (url := proxy.get_secret_value()):
                found += [url, urlsplit(url if "://" in url else f"http://{url}").password or ""]
        return tuple(s for s in dict.fromkeys(found) if s)

    def proxy_of(self, deployment: Deployment) -> str | None:
        """The proxy setting of one of its deployments (its own, else the vendor's; None: unset)."""
        proxy = deployment.proxy if deployment.proxy is not None else self.proxy
        return None if proxy is None else proxy.get_secret_value()

    def ca_file_of(self, deployment: Deployment) -> str:
        return deployment.ca_file if deployment.ca_file is not None else self.ca_file


# Fields every vendor has, whatever its protocol (api_key_env and enabled are read here, not kept).
# The fields of `timeouts` and `health` may also be written flat (GATEWAY_VENDOR_X_FIRST_BYTE).
VENDOR_FIELDS = ("protocol", "base_url", "api_key", "api_key_env", "enabled", "retries", "deployments",
                 "routing", "proxy", "ca_file", *Timeouts.model_fields, *Health.model_fields)  # fmt: skip

@dataclass(frozen=True, slots=True)
class Protocol:
    """What the loader knows of a vendor protocol; its adapter declares it (gateway/vendors/)."""

    options: frozenset[str]  # the protocol's own option names
    default_base_url: str = ""  # where a vendor of it is when its configuration names no base_url
    hosted_url: str = ""  # the hosted service it is named after: <PROTOCOL>_API_KEY configures it


def describe(exc: ValidationError, name: Any = ".".join) -> str:
    """A pydantic error as one line per problem, each named the way the user wrote it."""
    return "; ".join(f"{name(tuple(str(part) for part in e['loc']))}: {e['msg']}" for e in exc.errors())


def load_vendors(table: Mapping[str, Any], env: Mapping[str, str],
             protocols: Mapping[str, Protocol]) -> dict[str, VendorConfig]:
    raw: dict[str, dict[str, Any]] = {
        "local": {"protocol": "local"},  # the embedded model: on unless disabled
    }
    for name, protocol in protocols.items():
        if not protocol.hosted_url:
            continue
        base_url = protocol.hosted_url
        key_env = f"{name.upper()}_API_KEY"
        if env.get(key_env):
            raw[name] = {
                "protocol": name,
                "base_url": env.get(f"{name.upper()}_BASE_URL", base_url),
                "api_key_env": key_env,
            }
    for name, values in table.items():
        if not isinstance(values, Mapping):
            raise ConfigError(f"vendor {name!r}: a table ([vendors.{name}]), not a {type(values).__name__}")
        if "api_key" in values:
            raise ConfigError(f"vendor {name!r}: put the key in an environment variable and name it in api_key_env")
        raw.setdefault(name.lower(), {}).update(values)
    # The longest matching field wins, so vendor names may contain underscores
    # (GATEWAY_VENDOR_MY_VLLM_BASE_URL is vendor "my_vllm").
    options = {name for protocol in protocols.values() for name in protocol.options}
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
    for name in raw:
        if not VENDOR_NAME.fullmatch(name):
            raise ConfigError(f"vendor {name!r}: a vendor's name is 1 to 64 lowercase letters, digits, _ or - "
                              "(it is the first part of vendor/model)")
    return {name: vendor for name, values in raw.items() if (vendor := _vendor(name, dict(values), env, protocols))}


def _vendor(name: str, values: dict[str, Any], env: Mapping[str, str],
            protocols: Mapping[str, Protocol]) -> VendorConfig | None:
    try:
        enabled = _Switch.model_validate({"on": values.pop("enabled", True)}).on
    except ValidationError as exc:
        raise ConfigError(f"vendor {name!r} enabled: {exc.errors()[0]['msg']}") from None
    if not enabled:
        return None
    protocol = values.pop("protocol", None)
    if not protocol:
        raise ConfigError(f"vendor {name!r} needs a protocol ({', '.join(protocols)})")
    known = protocols.get(protocol)
    default_url = known.default_base_url if known else ""
    default_key = _Key(values.pop("api_key_env", None), values.pop("api_key", ""))
    common: dict[str, Any] = {"name": name, "protocol": protocol}
    for table, model in (("timeouts", Timeouts), ("health", Health)):
        common[table] = dict(values.pop(table, {}))
        for name_field in set(model.model_fields) & set(values):
            common[table][name_field] = values.pop(name_field)
    if "deployments" in values:
        if "base_url" in values:
            raise ConfigError(f"vendor {name!r}: give either base_url or deployments, not both")
        common["deployments"] = _deployments(name, default_url, values.pop("deployments"), default_key, env)
    else:
        common["base_url"] = str(values.pop("base_url", "") or default_url).rstrip("/")
        common["api_key"] = default_key.read(env, f"vendor {name!r}")
    for name_field in ("retries", "routing", "proxy", "ca_file"):
        if name_field in values:
            common[name_field] = values.pop(name_field)
    try:
        return VendorConfig.model_validate(common | {"options": values})
    except ValidationError as exc:
        raise ConfigError(f"vendor {name!r}: {describe(exc)}") from None


@dataclass(frozen=True)
class _Key:
    """Where a key comes from: the variable `api_key_env` names, or a value given directly
    (GATEWAY_VENDOR_<NAME>_API_KEY)."""

    env_name: str | None
    value: str = ""

    def read(self, env: Mapping[str, str], where: str) -> str:
        if self.value:
            return self.value
        if self.env_name and not env.get(self.env_name):
            raise ConfigError(f"{where}: environment variable {self.env_name} is not set")
        return env.get(self.env_name, "") if self.env_name else ""


def _deployments(vendor: str, default_url: str, entries: Any, default_key: _Key,
                 env: Mapping[str, str]) -> list[dict[str, Any]]:
    """`deployments = [{base_url, api_key_env, weight, max_concurrent, name}, ...]` (or that array
    as JSON, from the environment), each key read from its variable (default: the vendor's), each
    URL defaulting to the protocol's hosted endpoint."""
    if isinstance(entries, str):
        try:
            entries = json.loads(entries)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"vendor {vendor!r} deployments: not a JSON array ({exc})") from None
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(f"vendor {vendor!r} deployments: give a non-empty array of tables")
    deployments = []
    for index, entry in enumerate(entries):
        entry = dict(entry)
        where = f"vendor {vendor!r} deployment {index}"
        for field in ("base_url", "api_key_env"):
            if field in entry and not isinstance(entry[field], str):
                raise ConfigError(f"{where} {field}: a string, not a {type(entry[field]).__name__}")
        if "api_key" in entry:
            raise ConfigError(f"{where}: put the key in an environment variable and name it in api_key_env")
        key = _Key(entry.pop("api_key_env")) if "api_key_env" in entry else default_key
        base_url = str(entry.pop("base_url", "") or default_url).rstrip("/")
        if not base_url:
            raise ConfigError(f"{where} needs a base_url")
        deployments.append(entry | {"base_url": base_url, "api_key": key.read(env, where)})
    return deployments


class _Switch(BaseModel):
    on: bool
