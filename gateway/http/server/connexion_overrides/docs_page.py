"""The docs page (/docs/, Swagger UI): Connexion's own layer, declaring the one path it serves, its
answers sent with a Content-Security-Policy (as the dashboard's are: http/ui/dashboard.py).

Its `prefix` tells FixedRoutes (fixed_routes.py) that this layer serves nothing outside it (with
`serve_spec` off, Connexion's Swagger UI routes are the page, its config and its assets, all
under the path), so the contract's requests pass it by. What takes Connexion's way (404, 405,
HEAD, the dashboard's files) goes through its router on the way, as in Connexion: sparing those
requests that is all an override of its __call__ bought once the fixed routes were linked
(docs/decisions/0001-connexion.md)."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from connexion.middleware.swagger_ui import SwaggerUIMiddleware
from starlette.types import Receive, Scope, Send

HOOKS: tuple[tuple[Any, str], ...] = ()  # a subclass with one attribute of its own

# What the page may load and where it may send: its own files and the gateway only (Try it out
# calls the API on the page's origin), never inside another site's frame. Swagger UI sets styles
# inline and draws icons as data: URLs; its one inline script (the page's set-up, rendered by
# Connexion's template) is allowed by its hash, computed from the page as it is sent.
_POLICY = ("default-src 'none'; script-src 'self'{hashes}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
           "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)
_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]


def policy(page: bytes) -> bytes:
    """The page's Content-Security-Policy: `_POLICY` with a hash of each inline script of `page`."""
    hashes = "".join(f" 'sha256-{base64.b64encode(hashlib.sha256(script).digest()).decode()}'"
                     for script in _INLINE_SCRIPT.findall(page))
    return _POLICY.format(hashes=hashes).encode()


def docs_middleware(path: str) -> type[SwaggerUIMiddleware]:
    """Connexion's Swagger UI layer, saying it serves the page and its assets under `path` ("/docs")."""

    class DocsMiddleware(SwaggerUIMiddleware):
        prefix = path.rstrip("/")

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            served = scope["type"] == "http" and (scope["path"] + "/").startswith(self.prefix + "/")
            await super().__call__(scope, receive, _with_policy(send) if served else send)

    return DocsMiddleware


def _with_policy(send: Send) -> Send:
    """`send` adding the policy to each answer of the docs page's: the head is held until the body
    (one piece: Connexion renders the page whole) gives the inline scripts to hash."""
    held: dict[str, Any] = {}

    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            held.update(message)
            return
        if held:
            start = {**held, "headers": [*held.get("headers", ()), *_HEADERS,
                                         (b"content-security-policy", policy(message.get("body", b"")))]}
            held.clear()
            await send(start)
        await send(message)

    return sending
