"""Connexion security handlers for the spec's two schemes, `x-api-key` and `Authorization: Bearer`.

They resolve to our own check instead of a function named in a vendor extension of the spec, and
call it directly: Connexion's generic wrapper inspects the function's signature on every request.
"""

from __future__ import annotations

from typing import Any

from connexion.lifecycle import ConnexionRequest
from connexion.security import ApiKeySecurityHandler, BearerSecurityHandler

from gateway.errors import AuthenticationFailed

TOKEN_INFO_KEY = "caller"


async def authenticate(request: ConnexionRequest, key: str, required_scopes: Any = None) -> dict[str, Any]:
    caller = await request.scope["state"]["services"].keys.caller(key)
    if caller is None:
        raise AuthenticationFailed("invalid or revoked API key", code="invalid_api_key")
    return {TOKEN_INFO_KEY: caller, "sub": caller.key_id}


class ApiKeyHandler(ApiKeySecurityHandler):
    def _resolve_func(self, security_scheme: dict) -> Any:
        return authenticate

    def check_api_key(self, api_key_info_func: Any) -> Any:
        return api_key_info_func


class BearerHandler(BearerSecurityHandler):
    def _resolve_func(self, security_scheme: dict) -> Any:
        return authenticate

    def check_bearer_token(self, token_info_func: Any) -> Any:
        return token_info_func


SECURITY_MAP = {"apiKey": ApiKeyHandler, "bearer": BearerHandler}
