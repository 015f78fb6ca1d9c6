"""The usage dashboard's files, served at /ui/ beside the API (not through it: they are pages, not
operations of openapi.json). Every asset ships in the package (gateway/http/ui/, package data) and
is read once at start-up: the page works with no network but the gateway's own. What it shows comes
from the API's own operations (GET /v5/accounts, GET /v5/usage; the keys page, admin.html, those
under /v5/admin/), called by the page with the key the person signed in with, which the page keeps
in the browser tab's sessionStorage only.

The files are plain HTML, CSS and JavaScript written for this gateway (no build step, no third-party
code), sent with a Content-Security-Policy that lets the page load nothing but them and talk to
nothing but the gateway.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.core.errors import clip

PREFIX = "/ui"
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
_HEADERS = [
    (b"cache-control", b"no-cache"),  # revalidated each time: a new gateway version shows its own page
    (b"content-security-policy",
     b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
     b"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


def assets() -> dict[str, tuple[bytes, str]]:
    """path under /ui/ -> (content, media type), from the files beside this module."""
    folder = files("gateway.http.ui")
    found = {}
    for entry in folder.iterdir():
        kind = _TYPES.get("." + entry.name.rpartition(".")[2])
        if kind is not None:
            found[entry.name] = (entry.read_bytes(), kind)
    found[""] = found["index.html"]
    return found


class DashboardMiddleware:
    """An ASGI middleware (first in Connexion's stack after its error handling, so its errors are
    the API's JSON errors): GET and HEAD of /ui/<file> answered here, everything else passed on."""

    prefix = PREFIX  # all it serves (FixedRoutes passes it by for the contract's paths)

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._assets = assets()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == PREFIX or path.startswith(PREFIX + "/")):
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            raise HTTPException(405, "the dashboard's files only take GET and HEAD", headers={"allow": "GET, HEAD"})
        if path == PREFIX:  # the page's relative links need the slash
            await _send(send, 308, b"", [(b"location", f"{PREFIX}/".encode())], head=False)
            return
        found = self._assets.get(path[len(PREFIX) + 1:])
        if found is None:
            raise HTTPException(404, f"no such dashboard file: {clip(path)}")
        body, kind = found
        await _send(send, 200, body, [(b"content-type", kind.encode()), *_HEADERS], head=scope["method"] == "HEAD")


async def _send(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]], head: bool) -> None:
    start: dict[str, Any] = {"type": "http.response.start", "status": status,
                             "headers": [*headers, (b"content-length", str(len(body)).encode())]}
    await send(start)
    await send({"type": "http.response.body", "body": b"" if head else body})
