"""Connexion's security handlers for the spec's two schemes (`apiKey` in x-api-key, and `bearer`),
answered by the gateway's own key check (http/server/security.py), with the scopes the operation's
security requirement names (openapi.json: `{"APIKeyHeader": ["admin"]}`). Connexion still reads the key from
the header the spec names, tries the operation's security requirements in order and puts what
the check returns in the request's context; these subclasses only change which function it
calls, and how. Connexion's would resolve a function named in a vendor extension of the spec
(x-apikeyInfoFunc), and wrap it in a check that inspects its signature on every request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from connexion.lifecycle import ConnexionRequest
from connexion.security import NO_VALUE, ApiKeySecurityHandler, BearerSecurityHandler

HOOKS: tuple[tuple[Any, str], ...] = (
    (ApiKeySecurityHandler, "_resolve_func"),
    (ApiKeySecurityHandler, "check_api_key"),
    (BearerSecurityHandler, "_resolve_func"),
    (BearerSecurityHandler, "check_bearer_token"),
    (BearerSecurityHandler, "get_fn"),
    (BearerSecurityHandler, "get_auth_header_value"),
)

KeyCheck = Callable[[ConnexionRequest, str, Any], Awaitable[dict[str, Any]]]


def security_map(check: KeyCheck) -> dict[str, type]:
    """Connexion's `security_map` for the spec's two schemes, both answered by
    `check(request, key, required_scopes)`."""

    class ApiKeyHandler(ApiKeySecurityHandler):
        def _resolve_func(self, security_scheme: dict) -> Any:
            return check

        def check_api_key(self, api_key_info_func: Any) -> Any:
            return api_key_info_func

    class BearerHandler(BearerSecurityHandler):
        def get_fn(self, security_scheme: dict, required_scopes: Any) -> Any:
            # Connexion's drops the requirement's scopes for bearer tokens (OAuth2 alone has them
            # in OpenAPI 3.0); 3.1 lets every scheme name the roles it needs, and ours do.
            def verify(request: ConnexionRequest) -> Any:
                kind, token = self.get_auth_header_value(request)
                return NO_VALUE if kind != "bearer" else check(request, token, required_scopes)

            return verify

        def _resolve_func(self, security_scheme: dict) -> Any:
            return check

        def check_bearer_token(self, token_info_func: Any) -> Any:
            return token_info_func

    return {"apiKey": ApiKeyHandler, "bearer": BearerHandler}
