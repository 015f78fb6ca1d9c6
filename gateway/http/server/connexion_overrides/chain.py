"""An operation's chain, linked out of the layers Connexion built: each routed layer (security,
validation, response validation when on, the handler call) holds one operation object per
operationId, which calls the next *layer*, and that layer looks the same operation up again. Linked
here, each operation object calls the next one directly; the objects, and what they check, are
Connexion's (and ours where http/server/connexion_overrides/ replaces them), built from openapi.json.

Linking is refused (`Unlinkable`) unless the stack is one this module understands: between the
layer asking and Connexion's routing, only layers that serve the paths under their own `prefix`;
below the routing, only routed layers of one API each and lifespan layers, which hand every HTTP
request on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from connexion.middleware.abstract import RoutedAPI, RoutedMiddleware
from connexion.middleware.lifespan import LifespanMiddleware
from connexion.middleware.main import ConnexionMiddleware
from connexion.middleware.request_validation import RequestValidationOperation
from connexion.middleware.response_validation import ResponseValidationOperation
from connexion.middleware.routing import RoutingMiddleware
from connexion.middleware.security import SecurityOperation
from starlette.types import ASGIApp

HOOKS: tuple[tuple[Any, str], ...] = (
    (ConnexionMiddleware, "middleware_stack"),  # the built layers, outermost first
    (RoutedMiddleware, "apis"),
    (RoutedMiddleware, "app"),
    (RoutedAPI, "operations"),
    (SecurityOperation, "next_app"),
    (RequestValidationOperation, "next_app"),
    (ResponseValidationOperation, "next_app"),
    (LifespanMiddleware, "next_app"),
)


class Unlinkable(Exception):
    """The built stack holds a layer this module does not know: its requests take Connexion's way."""


@dataclass(frozen=True, slots=True)
class Below:
    """What stands below a layer of Connexion's built stack."""

    prefixes: tuple[str, ...]  # of the layers before Connexion's routing: each serves only the paths under it
    routed: tuple[RoutedMiddleware, ...]  # the routed layers after it, outermost first
    base_path: str  # the one API's base path

    def serves(self, path: str) -> bool:
        """Whether a layer passed by would answer `path` itself."""
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in self.prefixes)


def below(connexion_app: Any, layer: object) -> Below:
    """The layers below `layer` in `connexion_app`'s built stack (`Unlinkable` unless understood)."""
    if not isinstance(connexion_app, ConnexionMiddleware) or not connexion_app.middleware_stack:
        raise Unlinkable("the app is not a built Connexion middleware stack")
    stack = list(connexion_app.middleware_stack)
    under = stack[[id(each) for each in stack].index(id(layer)) + 1:]
    prefixes: list[str] = []
    while under and not isinstance(under[0], RoutingMiddleware):
        prefix = getattr(under[0], "prefix", None)
        if not isinstance(prefix, str) or not prefix:
            raise Unlinkable(f"{type(under[0]).__name__} may serve any path")
        prefixes.append(prefix)
        under.pop(0)
    routed: list[RoutedMiddleware] = []
    for each in under[1:]:
        if isinstance(each, RoutedMiddleware):
            routed.append(each)
        elif not isinstance(each, LifespanMiddleware):  # lifespan passes every http request on
            raise Unlinkable(f"{type(each).__name__} stands between the routed layers")
    if not routed or any(len(each.apis) != 1 or len(next(iter(each.apis.values()))) != 1 for each in routed):
        raise Unlinkable("not one API in every routed layer")
    return Below(tuple(prefixes), tuple(routed), next(iter(routed[0].apis)))


def link(routed: tuple[RoutedMiddleware, ...], operation_id: str) -> ASGIApp | None:
    """The operation's links, each pointed at the next one instead of at the next layer (which
    would look the same operation up again): the first link, or None when a layer lacks it."""
    links = []
    for layer in routed:
        found = next(iter(layer.apis.values()))[0].operations.get(operation_id)
        if found is None:
            return None
        if found is layer.app:  # a layer with nothing to do for it hands it on (response validation off)
            continue
        links.append((layer, found))
    # Only lifespan layers, or routed ones handing it on, stand between two links: calling the next
    # link is what they would do.
    if not links or any(getattr(each, "next_app", None) is not layer.app for layer, each in links[:-1]):
        return None
    for (_, each), (_, following) in zip(links, links[1:], strict=False):
        each.next_app = following
    return links[0][1]
