"""The contract's fixed paths, routed by one lookup. A request for one of openapi.json's paths
without parameters, with a method of that path, goes from one dict lookup to its operation's own
chain (http/server/connexion_overrides/chain.py: security, validation, the handler). Connexion would route
it through Starlette's router (a Mount and a Route matched, a copy of the scope, a context
variable) and then look the operation up again in every routed layer (what that costs:
docs/decisions/0001-connexion.md). Every other request (404, 405, /docs, /ui, HEAD) takes
Connexion's way."""

from __future__ import annotations

import logging
from typing import Any

from connexion.middleware.abstract import ROUTING_CONTEXT
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.http.server.connexion_overrides import chain

log = logging.getLogger("gateway")

HOOKS: tuple[tuple[Any, str], ...] = ()  # what it reaches into is the linking's (chain.py)

Route = tuple[str, str, ASGIApp]  # the API's base path, the operation id, the first link of its chain
_SCHEMES = (b"http://", b"https://")


def _relative_redirects(send: Send) -> Send:
    """`send` with a redirect's Location made a path: Starlette's router answers /healthz/ with a
    redirect to scheme://<the request's Host header>/healthz, a client-chosen host that a cache or
    a careless client would follow elsewhere. The gateway never redirects to another host."""
    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start" and 300 <= message["status"] < 400:
            headers = []
            for name, value in message.get("headers", ()):
                if name.lower() == b"location" and value.startswith(_SCHEMES):
                    _, _, rest = value.partition(b"://")
                    path = rest[rest.find(b"/"):] if b"/" in rest else b"/"
                    value = b"/" + path.lstrip(b"/")  # never "//host": that too names another host
                headers.append((name, value))
            message = {**message, "headers": headers}
        await send(message)

    return sending


class FixedRoutes:
    """Sits inside Connexion's error handling (what the chain raises is rendered as before) and
    before the layers it passes by: each of those must serve only the paths under its `prefix`
    (the docs page, the dashboard), then Connexion's routing. The chains are linked at the first
    request, once Connexion has built its layers (it does so at the first request or the
    lifespan's start); a layer the linking does not know leaves every request to Connexion's way,
    with a warning."""

    def __init__(self, app: ASGIApp, *, spec: dict[str, Any]) -> None:
        self.app = app
        self._wanted = {(method.upper(), path): operation["operationId"]
                        for path, item in spec["paths"].items() if "{" not in path
                        for method, operation in item.items()
                        if isinstance(operation, dict) and "operationId" in operation}
        self._routes: dict[tuple[str, str], Route] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            routes = self._routes
            if routes is None:
                routes = self._routes = self._link(scope.get("app"))
            route = routes.get((scope["method"], scope["path"]))
            if route is not None:
                base_path, operation_id, first = route
                # What Connexion's RoutingOperation leaves in the scope for the layers below it.
                scope.setdefault("path_params", {})
                scope.setdefault("extensions", {})[ROUTING_CONTEXT] = {"api_base_path": base_path,
                                                                       "operation_id": operation_id}
                await first(scope, receive, send)
                return
            send = _relative_redirects(send)
        await self.app(scope, receive, send)

    @property
    def linked(self) -> frozenset[tuple[str, str]]:
        """The (method, path) pairs routed by lookup (none before the first request)."""
        return frozenset(self._routes or ())

    def _link(self, connexion_app: Any) -> dict[tuple[str, str], Route]:
        """`connexion_app`: the ConnexionMiddleware, which puts itself in every request's scope."""
        try:
            below = chain.below(connexion_app, self)
        except chain.Unlinkable as exc:
            log.warning("every request takes Connexion's routing: %s", exc)
            return {}
        routes: dict[tuple[str, str], Route] = {}
        for (method, path), operation_id in self._wanted.items():
            if below.serves(path):
                continue
            first = chain.link(below.routed, operation_id)
            if first is not None:
                routes[(method, path)] = (below.base_path, operation_id, first)
        return routes
