"""API keys on the HTTP side: the check Connexion runs for the spec's two security schemes
(`x-api-key` and `Authorization: Bearer`), against the running gateway's key store
(gateway/store/accounts.py). Connexion runs security before body validation (no key and a bad
body: 401)."""

from __future__ import annotations

from typing import Any

from connexion.lifecycle import ConnexionRequest

from gateway.core.errors import AuthenticationFailed
from gateway.http.connexion_overrides.key_check import security_map
from gateway.http.context import CALLER_KEY


async def authenticate(request: ConnexionRequest, key: str, required_scopes: Any = None) -> dict[str, Any]:
    caller = await request.scope["state"]["services"].keys.caller(key)
    if caller is None:
        raise AuthenticationFailed("invalid or revoked API key", code="invalid_api_key")
    return {CALLER_KEY: caller, "sub": caller.key_id}


SECURITY_MAP = security_map(authenticate)
