"""The docs page (/docs/, Swagger UI): Connexion's own layer, declaring the one path it serves.

Its `prefix` tells FixedRoutes (fixed_routes.py) that this layer serves nothing outside it (with
`serve_spec` off, Connexion's Swagger UI routes are the page, its config and its assets, all
under the path), so the contract's requests pass it by. What takes Connexion's way (404, 405,
HEAD, the dashboard's files) goes through its router on the way, as in Connexion: sparing those
requests that is all an override of its __call__ bought once the fixed routes were linked
(docs/decisions/0001-connexion.md)."""

from __future__ import annotations

from typing import Any

from connexion.middleware.swagger_ui import SwaggerUIMiddleware

HOOKS: tuple[tuple[Any, str], ...] = ()  # a subclass with one attribute of its own


def docs_middleware(path: str) -> type[SwaggerUIMiddleware]:
    """Connexion's Swagger UI layer, saying it serves the page and its assets under `path` ("/docs")."""

    class DocsMiddleware(SwaggerUIMiddleware):
        prefix = path.rstrip("/")

    return DocsMiddleware
