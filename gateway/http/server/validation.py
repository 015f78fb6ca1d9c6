"""Request body validation against openapi.json, replacing Connexion's JSON body validator.

Connexion 3.3's own validator uses jsonschema Draft 4 (it ignores `const`, `if`/`then` and
`dependentSchemas`, which our 3.1 document uses), rebuilds the validator on every request, reports
only the first error as a 400, treats a chunked body as missing and answers 500 to a body that is
not UTF-8. This one reads the whole body (chunked or not, bounded by `max_body_bytes`), parses it
once, validates it with a cached Draft 2020-12 validator (jsonschema-rs) and raises a 422 that
lists every problem in the spec's `HTTPValidationError` shape.

The parsed body is left in the ASGI scope (`BODY_KEY`) so the operation does not parse it again.

Nesting is capped (`MAX_DEPTH`) between parsing and validation: orjson refuses more than 1024
levels by itself, but jsonschema-rs raises "Recursion limit reached" when it converts a value
nested more than 255 levels, and that must be a 422 like any other bad body, at any depth.

Query, header and path parameters get the same treatment (ParameterValidator): Connexion's own
builds a Draft 4 validator per parameter per request and answers the first problem as a 400;
ours uses cached Draft 2020-12 validators that also check `format` (e.g. `date-time`) and
answers every problem as the same 422, located as ["query", name], ["header", name]...
"""

from __future__ import annotations

from asyncio import timeout
from typing import Any

import jsonschema_rs
import orjson
from connexion.datastructures import MediaTypeDict
from connexion.lifecycle import ConnexionRequest
from starlette.datastructures import Headers
from starlette.types import Receive, Scope

from gateway.core.errors import ECHO_LIMIT, PayloadTooLarge, RequestTimeout, ValidationFailed, clip
from gateway.http.server.connexion_overrides.prepared_validation import body_validator
from gateway.http.context import BODY_ARRIVED_KEY, BODY_KEY

# Levels of JSON nesting a body may have: the contract's deepest value (a list of prompts inside
# the body) is two, and far below what jsonschema-rs can convert.
MAX_DEPTH = 32

# jsonschema keyword -> the error `type` FastAPI/pydantic clients already know.
_ERROR_TYPES = {
    "required": "missing",
    "additionalProperties": "extra_forbidden",
    "maximum": "less_than_equal",
    "minimum": "greater_than_equal",
    "exclusiveMaximum": "less_than",
    "exclusiveMinimum": "greater_than",
    "maxItems": "too_long",
    "minItems": "too_short",
    "maxLength": "string_too_long",
    "minLength": "string_too_short",
    "pattern": "string_pattern_mismatch",
    "type": "type_error",
    "anyOf": "union_error",
    "const": "literal_error",
    "enum": "enum",
    "propertyNames": "key_error",
}

# Fields whose pattern, were its mismatch told as the regular expression, would not say what is
# wanted: the words said instead (after the value).
_PATTERN_WORDS = {
    "model": "is not written vendor/name: a vendor, a slash and that vendor's name for the model (e.g. openai/gpt-4o)",
}

# Rules that span fields: the schema expresses them, but the keyword's own message would not say why.
_CROSS_FIELD = {
    "dependentSchemas": (("stream_options",), "stream_options is only allowed when stream is true"),
    "then": (("best_of",), "best_of greater than 1 cannot be used with stream"),
}


class SchemaValidators:
    """Compiled validators, one per schema object of the loaded spec (they live as long as the app)."""

    def __init__(self, validate_formats: bool = False) -> None:
        self._by_id: dict[int, tuple[dict, jsonschema_rs.Validator]] = {}
        self._validate_formats = validate_formats

    def get(self, schema: dict) -> jsonschema_rs.Validator:
        hit = self._by_id.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        validator = jsonschema_rs.Draft202012Validator(schema, validate_formats=self._validate_formats)
        self._by_id[id(schema)] = (schema, validator)
        return validator


def problems(
    validator: jsonschema_rs.Validator, instance: Any, where: tuple[str, ...] = ("body",)
) -> list[dict[str, Any]]:
    """Every schema violation of `instance`, as HTTPValidationError entries located under `where`."""
    detail: list[dict[str, Any]] = []
    for error in validator.iter_errors(instance):
        for entry in _entries(error, instance, where):
            if entry not in detail:  # one cross-field rule can fail through several schema paths
                detail.append(entry)
    return detail


def _entries(error: jsonschema_rs.ValidationError, root: Any, where: tuple[str, ...]) -> list[dict[str, Any]]:
    for step in error.schema_path:
        if step in _CROSS_FIELD:
            fields, message = _CROSS_FIELD[step]
            return [{"loc": [*where, *fields], "msg": message, "type": "value_error"}]
    kind = error.kind
    keyword = str(error.schema_path[-1]) if error.schema_path else ""
    loc = [*where, *_path(root, error.instance_path)]
    if keyword == "required":
        return [{"loc": [*loc, kind.property], "msg": "Field required", "type": "missing"}]
    if keyword == "additionalProperties":
        return [{"loc": [*loc, clip(name)], "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}
                for name in kind.unexpected]
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.PropertyNames):
        inner = kind.error
        return [{"loc": [*loc, clip(inner.instance)], "msg": f"invalid key: {_message(inner)}", "type": "key_error"}]
    if keyword == "anyOf":
        # Report the branch the value was meant for (the one whose type matches), not "no branch matched".
        meant = [branch for branch in kind.context if not any(e.schema_path[-1] == "type" for e in branch)]
        if len(meant) == 1:
            return [entry for e in meant[0] for entry in _entries(e, root, where)]
    message = _message(error)
    if keyword == "pattern" and isinstance(error.instance, str) and loc[-1] in _PATTERN_WORDS:
        message = f"'{clip(error.instance)}' {_PATTERN_WORDS[loc[-1]]}"
    entry: dict[str, Any] = {"loc": loc, "msg": message, "type": _ERROR_TYPES.get(keyword, keyword)}
    entry["input"] = clip(error.instance) if isinstance(error.instance, str) else error.instance
    limit = getattr(kind, "limit", None)
    if limit is not None:
        entry["ctx"] = {"limit": limit}
    return [entry]


def _message(error: jsonschema_rs.ValidationError) -> str:
    """jsonschema-rs's message, which starts with the offending value as JSON; of a long value,
    only its start is repeated."""
    message = error.message
    if len(message) <= 2 * ECHO_LIMIT:
        return message
    try:
        shown = orjson.dumps(error.instance).decode()
    except orjson.JSONEncodeError:  # e.g. an integer beyond 64 bits
        shown = ""
    if shown and message.startswith(shown):
        return clip(shown) + message[len(shown):]
    return clip(message, 2 * ECHO_LIMIT)


def _path(root: Any, steps: list[str | int]) -> list[str | int]:
    """The instance path with object keys as strings (jsonschema-rs turns numeric keys into ints)."""
    out: list[str | int] = []
    node = root
    for step in steps:
        if isinstance(node, dict):
            step = str(step)
            node = node.get(step)
            out.append(clip(step))
            continue
        if isinstance(node, list) and isinstance(step, int) and step < len(node):
            node = node[step]
        out.append(step)
    return out


def json_invalid(message: str) -> ValidationFailed:
    return ValidationFailed([{"loc": ["body"], "msg": message, "type": "json_invalid"}])


def validator_map(max_body_bytes: int, body_timeout: float) -> dict[str, Any]:
    """Connexion's `validator_map` entry for JSON bodies, bound to this app's limits."""
    validators = SchemaValidators()

    async def check(receive: Receive, scope: Scope, required: bool, schema: dict[str, Any]) -> tuple[Receive, Scope]:
        declared = _content_length(scope)
        if declared is not None and declared > max_body_bytes:
            raise PayloadTooLarge(f"request body is {declared} bytes; the limit is {max_body_bytes}")
        if scope.get("extensions", {}).get(BODY_ARRIVED_KEY):  # the connection holds it all: nothing to wait for
            body = await _read_body(receive, max_body_bytes)
        else:
            try:
                async with timeout(body_timeout):
                    body = await _read_body(receive, max_body_bytes)
            except TimeoutError:
                raise RequestTimeout(f"the request body did not arrive within {body_timeout:g}s") from None
        if not body:
            if required:
                raise ValidationFailed([{"loc": ["body"], "msg": "Field required", "type": "missing"}])
            return receive, scope
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise json_invalid(f"JSON decode error: {exc}") from None
        if _nested_deeper(body, parsed, MAX_DEPTH):
            raise json_invalid(f"JSON nested more than {MAX_DEPTH} levels deep")
        validator = validators.get(schema)
        if not validator.is_valid(parsed):  # one pass without building errors, for the usual valid body
            raise ValidationFailed(problems(validator, parsed))
        scope.setdefault("extensions", {})[BODY_KEY] = parsed
        return _replay(body, receive), scope

    return {"body": MediaTypeDict({"*/*json": body_validator(check)}), "parameter": ParameterValidator}


_PARAMETER_SCHEMAS = SchemaValidators(validate_formats=True)  # the spec's parameter schemas live as long as the app


class ParameterValidator:
    """Connexion's `validator_map["parameter"]`, made once per operation
    (http/server/connexion_overrides/prepared_validation.py); the compiled validators are shared."""

    def __init__(self, parameters: list[dict[str, Any]], uri_parser: Any, strict_validation: bool = False,
                 security_query_params: list[str] | None = None) -> None:
        self._parameters = parameters
        self._uri_parser = uri_parser
        self._strict = strict_validation
        self._known = {p["name"] for p in parameters if p["in"] == "query"} | set(security_query_params or ())
        self._headers = any(p["in"] == "header" for p in parameters)
        self._needs_request = any(p["in"] != "header" for p in parameters)

    def validate(self, scope: Scope) -> None:
        # Connexion's request (its URI parser) only when a query, path or cookie parameter needs it:
        # most operations take headers alone, and a request without a query string has no extras.
        request = None
        if self._needs_request or (self._strict and scope.get("query_string")):
            request = ConnexionRequest(scope, uri_parser=self._uri_parser)
        detail: list[dict[str, Any]] = []
        if self._strict and request is not None:
            detail += [{"loc": ["query", clip(name)], "msg": "Extra inputs are not permitted",
                        "type": "extra_forbidden"} for name in request.query_params if name not in self._known]
        sources: dict[str, Any] = {"header": Headers(scope=scope)} if self._headers else {}
        if request is not None and self._needs_request:
            sources |= {"query": request.query_params, "path": request.path_params, "cookie": request.cookies}
        for parameter in self._parameters:
            where, name = parameter["in"], parameter["name"]
            value = sources[where].get(name)
            if value is None:
                if parameter.get("required"):
                    detail.append({"loc": [where, name], "msg": "Field required", "type": "missing"})
                continue
            detail += problems(_PARAMETER_SCHEMAS.get(parameter.get("schema", {})), value, (where, name))
        if detail:
            raise ValidationFailed(detail)


def _nested_deeper(body: bytes, value: Any, limit: int) -> bool:
    """Whether `value` (parsed from `body`) nests containers more than `limit` levels deep. Level by
    level, without recursion; a body with fewer brackets than the limit cannot be that deep."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(limit):
        level = [child for node in level
                 for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, dict | list)]
        if not level:
            return False
    return True


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive channel that hands out the already-read body once, then the original channel."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
