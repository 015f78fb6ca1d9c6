"""API keys on the HTTP side: the check Connexion runs for the spec's two security schemes
(`x-api-key` and `Authorization: Bearer`), against the running gateway's key store
(gateway/store/accounts.py): the key must be known, neither expired (401 `key_expired`) nor past
a rotation's grace, and hold the scope the operation's security requirement names in openapi.json
(403 `insufficient_scope`). Connexion runs security before body validation (no key and a bad
body: 401). A caller's own vendor key is refused (`refuse_callers_vendor_key`). And who is an
operator: who may read /metrics and /readyz's detail."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from connexion.lifecycle import ConnexionRequest
from starlette.datastructures import Headers

from gateway.core.config import Settings
from gateway.core.errors import AuthenticationFailed, BadRequest, GatewayError, PermissionDenied, StorageUnavailable, clip
from gateway.http.context import CALLER_KEY
from gateway.http.server.connexion_overrides.key_check import security_map
from gateway.limits.table import LimitsTable
from gateway.store import key_cache
from gateway.store.accounts import Caller

log = logging.getLogger("gateway.limits")

# Keys whose limits were removed since the key cache looked them up: the copy of the limits was
# read again for them once, and is not again until the key is looked up anew (see limits_known).
MAX_CONFIRMED = 10_000
_confirmed: dict[str, Caller] = {}


async def authenticate(request: ConnexionRequest, key: str, required_scopes: Any = None) -> dict[str, Any]:
    """The key's caller, if the key is valid now and has the scopes the operation's security
    requirement names (Connexion reads them from openapi.json when it builds the operation), once
    this gateway knows the limits that apply to it."""
    services = request.scope["state"]["services"]
    caller = await services.keys.caller(key)
    if caller is None:
        raise AuthenticationFailed("invalid API key", code="invalid_api_key")
    refusal = refused(caller, required_scopes or (), key_cache.wall_clock())
    if refusal is not None:
        if isinstance(refusal, PermissionDenied):
            refusal.message += f", which {request.method} {clip(request.url.path)} needs"
        raise refusal
    await limits_known(services.limiter.table, caller)
    return {CALLER_KEY: caller, "sub": caller.key_id}


async def limits_known(table: LimitsTable, caller: Caller) -> None:
    """Returns once this gateway's copy of the limits holds every limit the key and its accounts
    had when the key was looked up. A key newer than the copy (made with limits or an allow-list,
    a rotation's successor) has the copy read again, and every request of it waits for that read,
    however many arrive at once: none is served before its limits are known, and a 503 answers
    while they cannot be read. (A limit set later on a known key reaches the copy with its next
    reread, within `limits_cache_seconds`.)"""
    if not caller.limited or _confirmed.get(caller.key_id) is caller:
        return
    subjects = table.subjects
    if all(subject in subjects for subject in caller.limited):
        return
    try:
        async with asyncio.timeout(key_cache.KeyCache.LOOKUP_TIMEOUT):
            await table.load()
    except Exception as exc:
        log.warning("cannot read the limits of key %s (%s); its request is refused", caller.key_id,
                    f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        raise StorageUnavailable("cannot read the limits of this key: the gateway's database is unavailable",
                                 code="database_unavailable") from None
    if not all(subject in table.subjects for subject in caller.limited):
        # Removed since the key was looked up: not read again for it until it is looked up anew.
        if len(_confirmed) >= MAX_CONFIRMED:
            _confirmed.clear()
        _confirmed[caller.key_id] = caller


def refused(caller: Caller, scopes: Iterable[str], now: float) -> GatewayError | None:
    """Why `caller` may not call an operation needing `scopes` at `now`, or None."""
    who = f"key {caller.key_id}" + (f" ({clip(caller.name)})" if caller.name else "")
    if caller.ends is not None and now >= caller.ends:
        ended = datetime.fromtimestamp(caller.ends, UTC).isoformat().replace("+00:00", "Z")
        if caller.replaced_by:
            return AuthenticationFailed(f"{who} was replaced by {caller.replaced_by} (a rotation) and stopped "
                                        f"working at {ended}", code="invalid_api_key")
        return AuthenticationFailed(f"{who} was revoked at {ended}", code="invalid_api_key")
    if caller.expires is not None and now >= caller.expires:
        expired = datetime.fromtimestamp(caller.expires, UTC).isoformat().replace("+00:00", "Z")
        return AuthenticationFailed(f"{who} expired at {expired}", code="key_expired")
    missing = [scope for scope in scopes if scope not in caller.scopes]
    if missing:
        return PermissionDenied(f"{who} lacks the scope '{missing[0]}'", code="insufficient_scope")
    return None


SECURITY_MAP = security_map(authenticate)
# The caller's own vendor key, as scale-gp-beta sends its `x_openai_api_key` (a header; the body
# field of the same name is refused by every vendor's chat record).
CALLERS_VENDOR_KEY = "x-openai-api-key"


def refuse_callers_vendor_key(headers: Headers) -> None:
    """A request carrying the caller's own OpenAI key is refused (400 naming the header), as the
    body field is: served with the gateway's keys and billed to the account, it would be accepted
    and ignored."""
    if CALLERS_VENDOR_KEY in headers:
        raise BadRequest(f"header '{CALLERS_VENDOR_KEY}' is not supported: the gateway serves every request with "
                         "its own vendor keys, limited and billed to the account, and a caller's OpenAI key would "
                         "bypass both", code="unsupported_parameter", param=CALLERS_VENDOR_KEY)


# -- operators: who may read /metrics and /readyz's detail ----------------------------------------
# There are no key scopes yet: an operator is whoever presents GATEWAY_METRICS_KEY's secret, or any
# gateway API key when GATEWAY_METRICS_API_KEYS=1 says the API keys' holders are trusted with it.


def loopback_only(settings: Settings) -> bool:
    """Whether the gateway listens where only this host can reach it."""
    if settings.host == "localhost":
        return True
    try:
        return ipaddress.ip_address(settings.host).is_loopback
    except ValueError:
        return False  # a host name, or "" (every address)


def metrics_open(settings: Settings) -> bool:
    """/metrics without any key: only on a loopback-only gateway with nothing configured to protect it."""
    return loopback_only(settings) and not settings.metrics_key.get_secret_value() and not settings.metrics_api_keys


def metrics_take_api_keys(settings: Settings) -> bool:
    """Whether a gateway API key may scrape: when asked (GATEWAY_METRICS_API_KEYS=1), and by default
    on a gateway reachable from other hosts with no metrics key (a scraper then needs some key)."""
    return settings.metrics_api_keys or not settings.metrics_key.get_secret_value()


def metrics_access(settings: Settings) -> str:
    """Who may read /metrics, as the startup log line says it."""
    if not settings.metrics:
        return "metrics off"
    if metrics_open(settings):
        return "metrics open to this host (it listens on loopback only)"
    keys = ["GATEWAY_METRICS_KEY's secret"] if settings.metrics_key.get_secret_value() else []
    keys += ["an API key"] if metrics_take_api_keys(settings) else []
    return f"metrics need {' or '.join(keys)}"


def presents_metrics_key(headers: Headers, settings: Settings) -> bool:
    secret = settings.metrics_key.get_secret_value().encode()
    if not secret:
        return False
    scheme, _, token = headers.get("authorization", "").partition(" ")
    candidates = [headers.get("x-api-key") or ""] + ([token.strip()] if scheme.lower() == "bearer" else [])
    return any(hmac.compare_digest(candidate.encode(), secret) for candidate in candidates if candidate)


def may_scrape(headers: Headers, caller: Caller | None, settings: Settings) -> bool:
    if metrics_open(settings):
        return True
    if caller is not None and metrics_take_api_keys(settings):
        return True
    return presents_metrics_key(headers, settings)


def is_operator(headers: Headers, caller: Caller | None, settings: Settings) -> bool:
    """Who sees /readyz's detail (addresses of the database and Redis, their errors): the metrics
    key, an API key when GATEWAY_METRICS_API_KEYS=1, or any API key on a gateway whose metrics are
    open (loopback only, nothing configured: whoever can reach it is on this host)."""
    if caller is not None and (settings.metrics_api_keys or metrics_open(settings)):
        return True
    return presents_metrics_key(headers, settings)
