"""The app factory: openapi.json, routed by Connexion to handlers/, behind our validator,
security handlers and error rendering."""

from __future__ import annotations

import functools
import logging

import orjson
from connexion.exceptions import ProblemException
from connexion.lifecycle import ConnexionRequest, ConnexionResponse
from connexion.middleware import main as connexion_middlewares
from connexion.resolver import Resolver
from connexion.spec import OpenAPISpecification
from starlette.exceptions import HTTPException

from gateway import validation
from gateway.config import ROOT, Settings
from gateway.errors import GatewayError, RequestInvalid, from_http_status
from gateway.lean import LeanApp, PreparedValidationMiddleware
from gateway.security import SECURITY_MAP
from gateway.services import lifespan
from handlers import resolve
from vendors.registry import Registry

log = logging.getLogger("gateway")

SPEC = ROOT / "openapi.json"


def create_app(settings: Settings | None = None) -> LeanApp:
    settings = settings or Settings.load()
    _accept_openapi_31()
    app = LeanApp(
        __name__,
        # Adapters are built here, so a configuration they refuse stops the start with a clear
        # message (gateway/cli.py) instead of a traceback from the lifespan.
        lifespan=functools.partial(lifespan, settings, Registry.from_settings(settings)),
        middlewares=_middlewares(settings),
    )
    app.add_api(
        SPEC,
        resolver=Resolver(function_resolver=resolve),
        validator_map=validation.validator_map(settings.max_body_bytes, settings.body_timeout),
        security_map=SECURITY_MAP,
        validate_responses=settings.validate_responses,
        strict_validation=True,
    )
    app.add_error_handler(GatewayError, _gateway_error)
    app.add_error_handler(RequestInvalid, _request_invalid)
    app.add_error_handler(ProblemException, _http_error)
    app.add_error_handler(HTTPException, _http_error)
    app.add_error_handler(Exception, _internal_error)
    return app


def _middlewares(settings: Settings) -> list:
    # Connexion's default stack without the Swagger UI and the context proxies (handlers get
    # an explicit Incoming request), with validators prepared once per operation.
    m = connexion_middlewares
    stack = [
        m.ServerErrorMiddleware,
        m.ExceptionMiddleware,
        m.RoutingMiddleware,
        m.SecurityMiddleware,
        PreparedValidationMiddleware,
        m.LifespanMiddleware,
    ]
    if settings.validate_responses:
        stack.insert(stack.index(m.LifespanMiddleware), m.ResponseValidationMiddleware)
    return stack


def _accept_openapi_31() -> None:
    """Connexion 3.3 checks documents against its OpenAPI 3.0 meta-schema and refuses 3.1
    (spec-first/connexion#1396). openapi.json is validated as 3.1 by tests/test_contract.py
    (openapi-spec-validator) and exercised by schemathesis instead."""
    OpenAPISpecification._validate_spec = classmethod(lambda cls, spec: None)


def _json(status: int, body: dict, headers: dict[str, str] | None = None) -> ConnexionResponse:
    return ConnexionResponse(status_code=status, mimetype="application/json", body=orjson.dumps(body), headers=headers)


def _gateway_error(request: ConnexionRequest, exc: GatewayError) -> ConnexionResponse:
    if exc.status >= 500:
        log.warning("%s %s -> %s %s", request.method, request.url.path, exc.status, exc.message)
    return _json(exc.status, exc.body(), exc.headers())


def _request_invalid(request: ConnexionRequest, exc: RequestInvalid) -> ConnexionResponse:
    return _json(422, exc.body())


def _http_error(request: ConnexionRequest, exc: HTTPException) -> ConnexionResponse:
    error = from_http_status(exc.status_code, getattr(exc, "detail", None))
    response = _gateway_error(request, error)
    response.headers.update(exc.headers or {})  # e.g. the Allow header of a 405
    return response


def _internal_error(request: ConnexionRequest, exc: Exception) -> ConnexionResponse:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _gateway_error(request, GatewayError("internal error in the gateway", code="internal_error"))
