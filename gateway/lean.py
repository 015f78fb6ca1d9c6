"""Connexion's per-request work, done once per operation.

Connexion 3.3 redoes a lot on every request: the validation layer rebuilds its URI parser,
parameter validator and body validator and re-derives the operation's body definition about
seven times; the final operation rebuilds its decorators (three signature inspections) and
injects handler arguments through some thirty context-proxy reads. These subclasses of the same
Connexion parts build all of that once per operation and call handlers with one explicit
argument, an `Incoming` request. Routing, security and validation rules still come from
openapi.json alone. `bench/` measures the difference (see README, "Performance").
"""

from __future__ import annotations

from typing import Any

from connexion.apps.abstract import AbstractApp
from connexion.apps.asynchronous import AsyncApi, AsyncApp, AsyncASGIApp
from connexion.middleware.request_validation import (
    RequestValidationAPI,
    RequestValidationMiddleware,
    RequestValidationOperation,
)
from connexion.operations import AbstractOperation
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from gateway.validation import BODY_KEY


class Incoming:
    """A request as a handler sees it: the validated body, the caller, the services."""

    __slots__ = ("scope", "_headers")

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self._headers: Headers | None = None

    @property
    def body(self) -> Any:
        return self.scope["extensions"].get(BODY_KEY)

    @property
    def token_info(self) -> dict[str, Any]:
        return self.scope["extensions"]["connexion_context"]["token_info"]

    @property
    def services(self) -> Any:
        return self.scope["state"]["services"]

    @property
    def headers(self) -> Headers:
        if self._headers is None:
            self._headers = Headers(scope=self.scope)
        return self._headers


class HandlerOperation:
    """The innermost app of an operation: `response = await handler(Incoming(scope))`."""

    def __init__(self, function: Any) -> None:
        self.function = function

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.function(Incoming(scope))
        await response(scope, receive, send)


class _HandlerApi(AsyncApi):
    def make_operation(self, operation: AbstractOperation) -> HandlerOperation:  # type: ignore[override]
        return HandlerOperation(operation.function)


class _HandlerASGIApp(AsyncASGIApp):
    api_cls = _HandlerApi


class LeanApp(AsyncApp):
    """An AsyncApp whose operations call handlers directly (see HandlerOperation)."""

    def __init__(self, import_name: str, **kwargs: Any) -> None:
        # AsyncApp.__init__ only creates its ASGI app and calls AbstractApp.__init__; do the
        # same with ours.
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

    def _body_validator(self, mime_type: str) -> Any:
        try:
            return self._bodies[mime_type]
        except KeyError:
            pass
        self.validate_mime_type(mime_type)  # 415 unless the operation consumes it: the cache stays small
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
        mime_type, _ = self.extract_content_type(scope["headers"])
        validator = self._body_validator(mime_type.lower())
        if validator is not None:
            receive, scope = await validator.wrap_receive(receive, scope=scope)
        await self.next_app(scope, receive, send)


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
