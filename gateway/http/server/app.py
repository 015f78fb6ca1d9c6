"""The ASGI app: openapi.json, routed by Connexion to the handlers, behind our validator,
security handlers and error rendering. What a request meets, outermost first: CORS (when
GATEWAY_CORS_ORIGINS allows browser pages of other origins), the metrics, traces and access log
of completions (http/observe/observability.py), Connexion's error handling, the contract's fixed paths
routed by one lookup (http/server/connexion_overrides/fixed_routes.py), the docs page (/docs/), the usage
dashboard's files at /ui/ (http/ui/dashboard.py: pages beside the API, not operations of it),
Connexion's routing, the key check (http/server/security.py), the body and parameter validation
(http/server/validation.py), then the handler the operationId maps to."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

import orjson
from connexion.exceptions import ProblemException
from connexion.lifecycle import ConnexionRequest, ConnexionResponse
from connexion.middleware import main as connexion_middlewares
from connexion.options import SwaggerUIOptions
from connexion.resolver import Resolver
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware

from gateway.core.config import Settings
from gateway.core.errors import ClientDisconnected, GatewayError, ValidationFailed, from_http_status
from gateway.core.redaction import Redactor
from gateway.http.observe import observability
from gateway.http.server import validation
from gateway.http.server.connexion_overrides import check_hooks
from gateway.http.server.connexion_overrides.direct_call import DirectCallApp, Handler
from gateway.http.server.connexion_overrides.docs_page import docs_middleware
from gateway.http.server.connexion_overrides.fixed_routes import FixedRoutes
from gateway.http.server.connexion_overrides.prepared_validation import PreparedValidationMiddleware
from gateway.http.server.connexion_overrides.spec_loading import accept_openapi_31
from gateway.http.server.path_hints import PathHints
from gateway.http.server.security import SECURITY_MAP
from gateway.http.ui.dashboard import DashboardMiddleware

log = logging.getLogger("gateway")

DOCS_PATH = "/docs"
# What a browser page of an allowed origin may send, and read of the answer.
CORS_REQUEST_HEADERS = ("x-api-key", "x-selected-account-id", "authorization", "content-type")
CORS_MAX_AGE = 600  # seconds a browser may keep a preflight's answer


def spec_path() -> Path:
    """The contract as installed: `make generate` copies openapi.json into the `generated`
    package, so a wheel carries it (tests check the copy is current)."""
    return Path(str(files("generated") / "openapi.json"))


def contract() -> dict:
    """The contract as installed, parsed."""
    return orjson.loads(spec_path().read_bytes())


def operation_ids(spec: dict) -> list[str]:
    """The operationId of every operation of the contract `spec`, each of which needs its handler."""
    return [operation["operationId"] for item in spec["paths"].values() for operation in item.values()
            if isinstance(operation, dict) and "operationId" in operation]


def create_app(settings: Settings, lifespan: Any, resolve: Callable[[str], Handler], redact: Redactor) -> DirectCallApp:
    """The app for `settings`. `lifespan` builds and closes the Services; `resolve` maps each
    operationId of the spec to its handler (and raises for one it lacks, failing the start);
    `redact` scrubs every error message a client gets."""
    check_hooks()
    accept_openapi_31()
    observed = observability.install(settings, redact)
    spec = contract()
    app = DirectCallApp(__name__, lifespan=lifespan, middlewares=_middlewares(settings, observed, spec))
    app.add_api(
        # The parsed document, not its path: from a path Connexion renders the file as a Jinja2
        # template and parses it as YAML, which yields the same dict for our JSON document
        # (tests/unit/test_app.py) at a cost: the garbage of it stayed in the process's memory.
        spec,
        resolver=Resolver(function_resolver=resolve),
        validator_map=validation.validator_map(settings.max_body_bytes, settings.body_timeout),
        security_map=SECURITY_MAP,
        validate_responses=settings.validate_responses,
        strict_validation=True,
        # The page only: GET /openapi.json is an operation of the contract (handlers/contract.py).
        swagger_ui_options=SwaggerUIOptions(serve_spec=False, swagger_ui=settings.docs, swagger_ui_path=DOCS_PATH,
                                            swagger_ui_config={"displayRequestDuration": True}),
    )
    errors = _ErrorRenderer(redact, spec)
    app.add_error_handler(ClientDisconnected, _client_disconnected)
    app.add_error_handler(GatewayError, errors.gateway_error)
    app.add_error_handler(ValidationFailed, _validation_failed)
    app.add_error_handler(ProblemException, errors.http_error)
    app.add_error_handler(HTTPException, errors.http_error)
    app.add_error_handler(Exception, errors.internal_error)
    return app


def request_methods(spec: dict) -> list[str]:
    """Every method the contract has an operation of (what a browser page may send, CORS)."""
    return sorted({method.upper() for path in spec["paths"].values() for method, operation in path.items()
                   if isinstance(operation, dict)})


def response_headers(spec: dict) -> list[str]:
    """Every header the contract documents on an answer (what a browser page may read, CORS)."""
    return sorted({name.lower() for path in spec["paths"].values() for operation in path.values()
                   if isinstance(operation, dict) for response in operation.get("responses", {}).values()
                   for name in response.get("headers", {})})


def _middlewares(settings: Settings, observed: observability.Observability, spec: dict) -> list:
    # Connexion's default stack without the context proxies (handlers get an explicit
    # HandlerRequest), with validators prepared once per operation, the Swagger UI only for its
    # own path, the contract's fixed paths routed by one lookup, and ours around it.
    m = connexion_middlewares
    stack = [
        functools.partial(observability.ObservedApp, observability=observed, routes=frozenset(spec["paths"])),
        m.ServerErrorMiddleware,
        m.ExceptionMiddleware,
        functools.partial(FixedRoutes, spec=spec),
        docs_middleware(DOCS_PATH),
        DashboardMiddleware,
        m.RoutingMiddleware,
        m.SecurityMiddleware,
        PreparedValidationMiddleware,
        m.LifespanMiddleware,
    ]
    if settings.validate_responses:
        stack.insert(stack.index(m.LifespanMiddleware), m.ResponseValidationMiddleware)
    if settings.cors_origins:
        # Outermost: a preflight is answered before anything else, and every answer (errors
        # too) carries the grant, so a page can read why it failed.
        stack.insert(0, functools.partial(
            CORSMiddleware, allow_origins=sorted(settings.cors_origins), allow_methods=request_methods(spec),
            allow_headers=list(CORS_REQUEST_HEADERS), expose_headers=response_headers(spec),
            max_age=CORS_MAX_AGE))
    return stack


def _allowed_methods(spec: dict) -> list[tuple[re.Pattern[str], str]]:
    """Each path of the contract (its parameters as one path segment each, or several for one of
    `format: path`, a model's id) and its methods, as an Allow header writes them."""
    found = []
    for path, item in spec["paths"].items():
        methods = {method.upper() for method, operation in item.items() if isinstance(operation, dict)}
        methods |= {"HEAD"} if "GET" in methods else set()
        spans = {f"{{{p['name']}}}" for operation in item.values() if isinstance(operation, dict)
                 for p in operation.get("parameters", ()) if p.get("schema", {}).get("format") == "path"}
        pattern = re.compile("".join((".+" if part in spans else "[^/]+") if part.startswith("{") else re.escape(part)
                                     for part in re.split(r"(\{[^}]+\})", path)))
        found.append((pattern, ", ".join(sorted(methods))))
    return found


def _json(status: int, body: dict, headers: dict[str, str] | None = None) -> ConnexionResponse:
    return ConnexionResponse(status_code=status, mimetype="application/json", body=orjson.dumps(body), headers=headers)




def _client_disconnected(request: ConnexionRequest, exc: ClientDisconnected) -> ConnexionResponse:
    # Nobody is left to read it; 499 ("client closed request") keeps access logs honest.
    return ConnexionResponse(status_code=499, body=b"")


def _validation_failed(request: ConnexionRequest, exc: ValidationFailed) -> ConnexionResponse:
    return _json(422, exc.body(), exc.headers())


class _ErrorRenderer:
    """Every error a client gets, as ErrorResponse JSON, its message scrubbed of secrets."""

    def __init__(self, redact: Redactor, spec: dict) -> None:
        self._redact = redact
        self._allowed = _allowed_methods(spec)
        self._hints = PathHints(spec["paths"])

    def gateway_error(self, request: ConnexionRequest, exc: GatewayError) -> ConnexionResponse:
        if exc.status >= 500:
            log.warning("%s %s -> %s %s", request.method, request.url.path, exc.status, exc.message)
        return _json(exc.status, exc.body(self._redact), exc.headers())

    def http_error(self, request: ConnexionRequest, exc: HTTPException) -> ConnexionResponse:
        error = from_http_status(exc.status_code, getattr(exc, "detail", None))
        if exc.status_code == 404 and (hint := self._hints.message(request.url.path)):
            error.message = hint  # a client set up for another base URL: the path it meant
        response = self.gateway_error(request, error)
        response.headers.update(exc.headers or {})  # e.g. the Allow header of a 405
        if exc.status_code == 405:
            # Connexion routes each operation on its own, and Starlette's 405 names the methods of
            # the first route of the path only: the path's methods are the contract's.
            allowed = next((methods for pattern, methods in self._allowed if pattern.fullmatch(request.url.path)), None)
            if allowed:
                for name in [name for name in response.headers if name.lower() == "allow"]:
                    del response.headers[name]
                response.headers["allow"] = allowed
        return response

    def internal_error(self, request: ConnexionRequest, exc: Exception) -> ConnexionResponse:
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return self.gateway_error(request, GatewayError("internal error in the gateway", code="internal_error"))
