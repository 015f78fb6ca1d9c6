"""What a running gateway holds for its whole life, created and closed by the app's lifespan.

Handlers reach it through the ASGI lifespan state (`scope["state"]["services"]`), so several apps
can live in one process (tests) without globals.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from gateway.auth import KeyStore, StaticKeyStore, new_key
from gateway.config import Settings
from gateway.limits import Admission
from vendors.registry import Registry

log = logging.getLogger("gateway")

DEFAULT_ACCOUNT = "default"


@dataclass(slots=True)
class Services:
    settings: Settings
    registry: Registry
    keys: KeyStore
    admission: Admission


def key_store(env: dict[str, str] | os._Environ[str]) -> KeyStore:
    """Keys from GATEWAY_API_KEYS ("key=account[,account];key2=account"), or one new key for
    the default account, printed once so the README's curl works on a fresh clone."""
    spec = env.get("GATEWAY_API_KEYS", "").strip()
    keys: dict[str, frozenset[str]] = {}
    for entry in filter(None, (part.strip() for part in spec.split(";"))):
        key, _, accounts = entry.partition("=")
        keys[key.strip()] = frozenset(a.strip() for a in (accounts or DEFAULT_ACCOUNT).split(",") if a.strip())
    if not keys:
        key = new_key()
        keys[key] = frozenset({DEFAULT_ACCOUNT})
        print(f"gateway: no GATEWAY_API_KEYS set; this run's API key (account '{DEFAULT_ACCOUNT}'): {key}", flush=True)
    return StaticKeyStore(keys)


@contextlib.asynccontextmanager
async def lifespan(settings: Settings, app: Any) -> AsyncIterator[dict[str, Any]]:
    registry = Registry.from_settings(settings)
    await registry.start()
    services = Services(settings=settings, registry=registry, keys=key_store(os.environ),
                        admission=Admission(settings.max_concurrent))
    log.info("gateway ready on http://%s:%s with vendors: %s", settings.host, settings.port, ", ".join(registry.names()))
    try:
        yield {"services": services}
    finally:
        await registry.close()
