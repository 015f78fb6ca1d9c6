"""The docs page (/docs/, Swagger UI): Connexion's own layer, declaring the one path it serves.

Connexion's Swagger UI layer matches every request against its routes (and copies the scope)
before passing it on; this one hands it only the requests under its own path, so the API's
requests pay one string comparison. Its `prefix` tells FixedRoutes (fixed_routes.py) that it may
pass this layer by for every other path."""

from __future__ import annotations

from typing import Any

from connexion.middleware.swagger_ui import SwaggerUIMiddleware
from starlette.types import Receive, Scope, Send

HOOKS: tuple[tuple[Any, str], ...] = (
    (SwaggerUIMiddleware, "app"),  # the next layer, which DocsMiddleware calls for every other request
)


def docs_middleware(path: str) -> type[SwaggerUIMiddleware]:
    """Connexion's Swagger UI layer, serving the page and its assets under `path` ("/docs") only."""
    served = path.rstrip("/")

    class DocsMiddleware(SwaggerUIMiddleware):
        prefix = served  # all it serves (FixedRoutes passes it by for the contract's paths)

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            route = scope.get("path", "")
            if scope["type"] == "http" and (route == served or route.startswith(served + "/")):
                await super().__call__(scope, receive, send)
            else:
                await self.app(scope, receive, send)

    return DocsMiddleware
