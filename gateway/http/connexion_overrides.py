"""Every place the gateway reaches into Connexion's internals, in one module, for one version.

Written against Connexion 3.3.0 (`CONNEXION_VERSION`). `check_hooks()` asserts that every private
name relied on below still exists; the app calls it at start-up and a test calls it too, so an
upgrade that removes a hook fails loudly at once instead of misbehaving later.

1. Prepared operations (`DirectCallApp`, `PreparedValidationMiddleware`). Connexion 3.3 redoes a
   lot on every request: the validation layer rebuilds its URI parser, parameter validator and
   body validator and re-derives the operation's body definition several times; the final
   operation rebuilds its decorators (three signature inspections) and injects handler arguments
   through many context-proxy reads. These subclasses build all of that once per operation and
   call handlers with one explicit argument, a `HandlerRequest`. Routing, security and
   validation rules still come from openapi.json alone. `bench/` measures the difference.
2. OpenAPI 3.1 (`accept_openapi_31`). Connexion checks documents against its OpenAPI 3.0
   meta-schema and refuses 3.1 (spec-first/connexion#1396). openapi.json is validated as 3.1 by
   a test (openapi-spec-validator) and exercised by schemathesis instead.
3. The JSON body validator (`body_validator`): Connexion's body validators are classes it builds
   per request; ours only carries the schema and whether a body is required (Connexion's private
   `_schema` and `_required`) over to http/validation.py, which does the work.
4. Security handlers (`ApiKeyHandler`, `BearerHandler`) that resolve to our own key check instead
   of a function named in a vendor extension of the spec, and call it directly: Connexion's
   generic wrapper inspects the function's signature on every request.
5. The docs page (`DocsMiddleware`): Connexion's Swagger UI layer matches every request against
   its routes (and copies the scope) before passing it on; ours hands it only the requests under
   its own path, so the API's requests pay one string comparison.
6. Fixed routes (`FixedRoutes`): a request for one of the contract's paths without parameters,
   with a method of that path, goes from one dict lookup to its operation's own chain (security,
   validation, the handler), each link calling the next directly. Connexion routes it through
   Starlette's router (a Mount and a Route matched, a copy of the scope, a context variable) and
   then looks the operation up again in every routed layer: about a tenth of a non-streamed
   completion's CPU time at concurrency 1 (py-spy). The chain is Connexion's own, built from
   openapi.json; every other request (404, 405, /docs, /ui, HEAD) takes Connexion's way.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from typing import Any

from connexion.apps.abstract import AbstractApp
from connexion.apps.asynchronous import AsyncApi, AsyncApp, AsyncASGIApp
from connexion.exceptions import UnsupportedMediaTypeProblem
from connexion.lifecycle import ConnexionRequest
from connexion.middleware.abstract import ROUTING_CONTEXT, RoutedAPI, RoutedMiddleware
from connexion.middleware.lifespan import LifespanMiddleware
from connexion.middleware.main import ConnexionMiddleware
from connexion.middleware.request_validation import (
    RequestValidationAPI,
    RequestValidationMiddleware,
    RequestValidationOperation,
)
from connexion.middleware.response_validation import ResponseValidationOperation
from connexion.middleware.routing import RoutingMiddleware
from connexion.middleware.security import SecurityOperation
from connexion.middleware.swagger_ui import SwaggerUIMiddleware
from connexion.operations import AbstractOperation
from connexion.security import ApiKeySecurityHandler, BearerSecurityHandler
from connexion.spec import OpenAPISpecification
from connexion.validators import AbstractRequestBodyValidator
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.core.errors import UnsupportedMediaType, clip
from gateway.http import hooks
from gateway.http.context import HandlerRequest

log = logging.getLogger("gateway")

CONNEXION_VERSION = "3.3.0"
Handler = Callable[[HandlerRequest], Awaitable[Response]]
KeyCheck = Callable[[ConnexionRequest, str, Any], Awaitable[dict[str, Any]]]

# (owner, private attribute) pairs this module relies on (checked by gateway/http/hooks.py).
_HOOKS: tuple[tuple[Any, str], ...] = (
    (AbstractApp, "__init__"),  # DirectCallApp runs it after setting its own _middleware_app
    (AsyncApp, "_middleware_app"),
    (AsyncASGIApp, "api_cls"),
    (AsyncApi, "make_operation"),
    (OpenAPISpecification, "_validate_spec"),
    (RequestValidationOperation, "_operation"),
    (RequestValidationOperation, "_validator_map"),
    (RequestValidationOperation, "extract_content_type"),
    (RequestValidationOperation, "validate_mime_type"),
    (RequestValidationAPI, "make_operation"),
    (RequestValidationMiddleware, "api_cls"),
    (ApiKeySecurityHandler, "_resolve_func"),
    (ApiKeySecurityHandler, "check_api_key"),
    (BearerSecurityHandler, "_resolve_func"),
    (BearerSecurityHandler, "check_bearer_token"),
    (AbstractRequestBodyValidator, "wrap_receive"),
    (AbstractRequestBodyValidator, "_required"),
    (AbstractRequestBodyValidator, "_schema"),
    (SwaggerUIMiddleware, "app"),  # the next layer, which DocsMiddleware calls for every other request
    (ConnexionMiddleware, "middleware_stack"),  # the built layers, outermost first (FixedRoutes)
    (RoutedMiddleware, "apis"),
    (RoutedMiddleware, "app"),
    (RoutedAPI, "operations"),
    (SecurityOperation, "next_app"),
    (RequestValidationOperation, "next_app"),
    (ResponseValidationOperation, "next_app"),
    (LifespanMiddleware, "next_app"),
)


class ConnexionHookMissing(RuntimeError):
    """A Connexion internal the gateway relies on is gone (an upgrade changed it)."""


def check_hooks() -> None:
    """Fail when a private Connexion hook used here is gone; warn when the version differs."""
    missing = hooks.missing(_HOOKS)
    if missing:
        raise ConnexionHookMissing(
            f"Connexion {version('connexion')} lacks what gateway/http/connexion_overrides.py relies on "
            f"(written for {CONNEXION_VERSION}): {', '.join(missing)}")
    if version("connexion") != CONNEXION_VERSION:
        log.warning("Connexion %s is installed; gateway/http/connexion_overrides.py was written for %s",
                    version("connexion"), CONNEXION_VERSION)


def accept_openapi_31() -> None:
    OpenAPISpecification._validate_spec = classmethod(lambda cls, spec: None)  # type: ignore[method-assign]


# -- 1. prepared operations ------------------------------------------------------------------
class HandlerOperation:
    """The innermost app of an operation: `response = await handler(HandlerRequest(scope))`."""

    def __init__(self, function: Handler) -> None:
        self.function = function

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.function(HandlerRequest(scope))
        await response(scope, receive, send)


class _HandlerApi(AsyncApi):
    def make_operation(self, operation: AbstractOperation) -> HandlerOperation:  # type: ignore[override]
        return HandlerOperation(operation.function)


class _HandlerASGIApp(AsyncASGIApp):
    api_cls = _HandlerApi


class DirectCallApp(AsyncApp):
    """An AsyncApp whose operations call handlers directly (see HandlerOperation)."""

    def __init__(self, import_name: str, **kwargs: Any) -> None:
        # AsyncApp.__init__ only creates its ASGI app and calls AbstractApp.__init__, which wraps
        # that app in the middleware stack: do the same with ours.
        self._middleware_app = _HandlerASGIApp()
        AbstractApp.__init__(self, import_name, **kwargs)


class _PreparedValidation(RequestValidationOperation):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        op = self._operation
        self._parameters = self._validator_map["parameter"](
            op.parameters,
            uri_parser=op.uri_parser_class(op.parameters, op.body_definition()),
            strict_validation=self.strict_validation,
            security_query_params=self.security_query_params,
        )
        self._bodies: dict[str, Any] = {}  # accepted media type -> body validator (None: nothing to check)
        self._by_header: dict[bytes | None, Any] = {}  # content-type header as sent -> the same

    def _body_validator(self, mime_type: str) -> Any:
        try:
            return self._bodies[mime_type]
        except KeyError:
            pass
        try:
            self.validate_mime_type(mime_type)  # 415 unless the operation consumes it: the cache stays small
        except UnsupportedMediaTypeProblem:
            raise UnsupportedMediaType(f"content-type '{clip(mime_type)}' is not accepted here; send "
                                       f"{' or '.join(self._operation.consumes)}") from None
        op = self._operation
        validator = None
        schema = op.body_schema(mime_type)
        try:
            validator_cls = self._validator_map["body"][mime_type] if schema else None
        except KeyError:  # MediaTypeDict matches media ranges in __getitem__ only
            validator_cls = None
        if validator_cls is not None:
            validator = validator_cls(
                schema=schema,
                required=op.request_body.get("required", False),
                nullable=False,
                encoding="utf-8",  # JSON is UTF-8 (RFC 8259); the body validator checks it
                strict_validation=self.strict_validation,
            )
        self._bodies[mime_type] = validator
        return validator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._parameters.validate(scope)
        header = _content_type(scope)
        if header is None and self._operation.request_body:
            # Connexion would take the first media type the operation consumes.
            raise UnsupportedMediaType(f"a request body needs a content-type header: "
                                       f"{' or '.join(self._operation.consumes)}", code="content_type_missing")
        validator = self._by_header.get(header, _UNSEEN)
        if validator is _UNSEEN:
            mime_type, _ = self.extract_content_type(scope["headers"])
            validator = self._body_validator(mime_type.lower())
            if len(self._by_header) < _HEADERS_KEPT:
                self._by_header[header] = validator
        if validator is not None:
            receive, scope = await validator.wrap_receive(receive, scope=scope)
        await self.next_app(scope, receive, send)


_UNSEEN = object()
_HEADERS_KEPT = 32  # content-type values remembered per operation: clients send a few; any beyond are parsed


def _content_type(scope: Scope) -> bytes | None:
    """The first content-type header's value, as Connexion reads it (extract_content_type)."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value
    return None


class _PreparedValidationAPI(RequestValidationAPI):
    def make_operation(self, operation: AbstractOperation) -> _PreparedValidation:
        return _PreparedValidation(
            self.next_app,
            operation=operation,
            strict_validation=self.strict_validation,
            validator_map=self.validator_map,
        )


class PreparedValidationMiddleware(RequestValidationMiddleware):
    """RequestValidationMiddleware with validators built once per operation."""

    api_cls = _PreparedValidationAPI


# -- 3. the JSON body validator ------------------------------------------------------------
BodyCheck = Callable[[Receive, Scope, bool, dict[str, Any]], Awaitable[tuple[Receive, Scope]]]


def body_validator(check: BodyCheck) -> type[AbstractRequestBodyValidator]:
    """A Connexion body validator class that hands the request to `check(receive, scope, required,
    schema)`, which reads, validates and replays the body."""

    class JSONBodyValidator(AbstractRequestBodyValidator):
        async def wrap_receive(self, receive: Receive, *, scope: Scope) -> tuple[Receive, Scope]:
            return await check(receive, scope, self._required, self._schema)

    return JSONBodyValidator



# -- 4. security handlers --------------------------------------------------------------------
def security_map(check: KeyCheck) -> dict[str, type]:
    """Connexion's `security_map` for the spec's two schemes (`apiKey` in x-api-key, and `bearer`),
    both answered by `check(request, key, required_scopes)`."""

    class ApiKeyHandler(ApiKeySecurityHandler):
        def _resolve_func(self, security_scheme: dict) -> Any:
            return check

        def check_api_key(self, api_key_info_func: Any) -> Any:
            return api_key_info_func

    class BearerHandler(BearerSecurityHandler):
        def _resolve_func(self, security_scheme: dict) -> Any:
            return check

        def check_bearer_token(self, token_info_func: Any) -> Any:
            return token_info_func

    return {"apiKey": ApiKeyHandler, "bearer": BearerHandler}


# -- 5. the docs page ------------------------------------------------------------------------
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


# -- 6. fixed routes -------------------------------------------------------------------------
Route = tuple[str, str, ASGIApp]  # the API's base path, the operation id, the first link of its chain


class FixedRoutes:
    """See 6. in the module's docstring. Sits inside Connexion's error handling (what the chain
    raises is rendered as before) and before the layers it passes by: each of those must serve
    only the paths under its `prefix` (the docs page, the dashboard), then Connexion's routing.
    The chains are linked at the first request, once Connexion has built its layers (it does so at
    the first request or the lifespan's start); a layer this does not know leaves every request
    to Connexion's way, with a warning."""

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
                base_path, operation_id, chain = route
                # What Connexion's RoutingOperation leaves in the scope for the layers below it.
                scope.setdefault("path_params", {})
                scope.setdefault("extensions", {})[ROUTING_CONTEXT] = {"api_base_path": base_path,
                                                                       "operation_id": operation_id}
                await chain(scope, receive, send)
                return
        await self.app(scope, receive, send)

    @property
    def linked(self) -> frozenset[tuple[str, str]]:
        """The (method, path) pairs routed by lookup (none before the first request)."""
        return frozenset(self._routes or ())

    def _link(self, connexion_app: Any) -> dict[tuple[str, str], Route]:
        try:
            return self._linked(connexion_app)
        except _Unlinkable as exc:
            log.warning("every request takes Connexion's routing: %s", exc)
            return {}

    def _linked(self, connexion_app: Any) -> dict[tuple[str, str], Route]:
        if not isinstance(connexion_app, ConnexionMiddleware) or not connexion_app.middleware_stack:
            raise _Unlinkable("the app is not a built Connexion middleware stack")
        stack = list(connexion_app.middleware_stack)
        below = stack[[id(layer) for layer in stack].index(id(self)) + 1:]
        passed: list[str] = []
        while below and not isinstance(below[0], RoutingMiddleware):
            prefix = getattr(below[0], "prefix", None)
            if not isinstance(prefix, str) or not prefix:
                raise _Unlinkable(f"{type(below[0]).__name__} may serve any path")
            passed.append(prefix)
            below.pop(0)
        routed: list[RoutedMiddleware] = []
        for layer in below[1:]:
            if isinstance(layer, RoutedMiddleware):
                routed.append(layer)
            elif not isinstance(layer, LifespanMiddleware):  # lifespan passes every http request on
                raise _Unlinkable(f"{type(layer).__name__} stands between the routed layers")
        if not routed or any(len(layer.apis) != 1 or len(next(iter(layer.apis.values()))) != 1 for layer in routed):
            raise _Unlinkable("not one API in every routed layer")
        routes: dict[tuple[str, str], Route] = {}
        for (method, path), operation_id in self._wanted.items():
            if any(path == p or path.startswith(p.rstrip("/") + "/") for p in passed):
                continue
            chain = _chain(routed, operation_id)
            if chain is not None:
                routes[(method, path)] = (next(iter(routed[0].apis)), operation_id, chain)
        return routes


class _Unlinkable(Exception):
    pass


def _chain(routed: list[RoutedMiddleware], operation_id: str) -> ASGIApp | None:
    """The operation's links, each pointed at the next one instead of at the next layer (which
    would look the same operation up again): the first link, or None when a layer lacks it."""
    links = []
    for layer in routed:
        link = next(iter(layer.apis.values()))[0].operations.get(operation_id)
        if link is None:
            return None
        if link is layer.app:  # a layer with nothing to do for it hands it on (response validation off)
            continue
        links.append((layer, link))
    # Only lifespan layers, or routed ones handing it on, stand between two links: calling the next
    # link is what they would do.
    if not links or any(getattr(link, "next_app", None) is not layer.app for layer, link in links[:-1]):
        return None
    for (_, link), (_, following) in zip(links, links[1:], strict=False):
        link.next_app = following
    return links[0][1]
