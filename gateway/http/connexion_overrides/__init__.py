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
6. Fixed routes (`fixed_routes.FixedRoutes`): a request for one of the contract's paths without
   parameters goes from one dict lookup to its operation's own chain, each link calling the next
   directly (chain.py links them out of the layers Connexion built).
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
from connexion.middleware.request_validation import (
    RequestValidationAPI,
    RequestValidationMiddleware,
    RequestValidationOperation,
)
from connexion.middleware.swagger_ui import SwaggerUIMiddleware
from connexion.operations import AbstractOperation
from connexion.security import ApiKeySecurityHandler, BearerSecurityHandler
from connexion.spec import OpenAPISpecification
from connexion.validators import AbstractRequestBodyValidator
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.core.errors import UnsupportedMediaType, clip
from gateway.http import hooks
from gateway.http.connexion_overrides import chain, fixed_routes
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
) + chain.HOOKS + fixed_routes.HOOKS


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
