"""The validation layer, prepared once per operation. Connexion's RequestValidationOperation
rebuilds on every request its URI parser, its parameter validator and its body validator, and
re-derives the operation's body definition several times. This one builds the parameter
validator once, and a body validator once per media type the operation accepts (remembering,
for a few content-type headers as sent, which one they lead to). The rules still come from
openapi.json alone, through Connexion's operation; the validators are the gateway's own
(http/server/validation.py), given to Connexion as its `validator_map`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from connexion.exceptions import UnsupportedMediaTypeProblem
from connexion.middleware.request_validation import (
    RequestValidationAPI,
    RequestValidationMiddleware,
    RequestValidationOperation,
)
from connexion.operations import AbstractOperation
from connexion.validators import AbstractRequestBodyValidator
from starlette.types import Receive, Scope, Send

from gateway.core.errors import UnsupportedMediaType, clip

HOOKS: tuple[tuple[Any, str], ...] = (
    (RequestValidationOperation, "_operation"),
    (RequestValidationOperation, "_validator_map"),
    (RequestValidationOperation, "extract_content_type"),
    (RequestValidationOperation, "validate_mime_type"),
    (RequestValidationAPI, "make_operation"),
    (RequestValidationMiddleware, "api_cls"),
    (AbstractRequestBodyValidator, "wrap_receive"),
    (AbstractRequestBodyValidator, "_required"),
    (AbstractRequestBodyValidator, "_schema"),
)


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


# -- the JSON body validator ----------------------------------------------------------------
BodyCheck = Callable[[Receive, Scope, bool, dict[str, Any]], Awaitable[tuple[Receive, Scope]]]


def body_validator(check: BodyCheck) -> type[AbstractRequestBodyValidator]:
    """A Connexion body validator class that hands the request to `check(receive, scope, required,
    schema)`, which reads, validates and replays the body. Connexion's body validators are classes
    it builds per request; this one only carries the schema and whether a body is required
    (Connexion's private `_schema` and `_required`) over to the check."""

    class JSONBodyValidator(AbstractRequestBodyValidator):
        async def wrap_receive(self, receive: Receive, *, scope: Scope) -> tuple[Receive, Scope]:
            return await check(receive, scope, self._required, self._schema)

    return JSONBodyValidator
