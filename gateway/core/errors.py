"""Every error a client can see, in one place.

Two bodies exist, both documented in openapi.json:
- 422 `HTTPValidationError` (`{"detail": [{"loc", "msg", "type", ...}], "error": {...}}`) for a
  body that is not valid JSON or does not match `CompletionRequest` — every problem at once, in
  FastAPI's shape and as one OpenAI-style error;
- `ErrorResponse` (`{"error": {"message", "type", "code", "param", "vendor"}}`) for the rest.

A `GatewayError` subclass per status keeps the status, the error type and the retry advice
together, so a handler only says what went wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

# How much of a client-supplied value (an account id, a header, a key name) an error message repeats:
# enough to recognise it, never enough to turn an error into an amplifier of what the client sent.
ECHO_LIMIT = 100


# The longest wait a Retry-After the gateway sends may ask for, in seconds. A vendor's longer (or
# unreadable) one is not passed on as it is: an hour is beyond any rate-limit window worth waiting
# out, and a client's header must not carry whatever number a vendor wrote.
MAX_RETRY_AFTER = 3600


def clip(value: str, limit: int = ECHO_LIMIT) -> str:
    """`value` for an error message: cut to `limit` characters, with an ellipsis when cut."""
    return value if len(value) <= limit else value[:limit] + "…"


class ConfigError(Exception):
    """The gateway's configuration is wrong; raised at start-up, never during a request."""


class StartupFailed(Exception):
    """The gateway cannot start for a reason already logged in one line (a database it cannot
    reach): no traceback follows it (http/server/connexion_overrides/direct_call.py)."""


class ClientDisconnected(Exception):
    """The client went away before its answer was ready: the work for it was cancelled, and
    nobody is left to answer (its meter records `client_disconnected`)."""


class GatewayError(Exception):
    status: ClassVar[int] = 500
    type: ClassVar[str] = "internal_error"
    # Whether the official SDKs (which retry 408/409/429/5xx) should retry: sent as x-should-retry.
    retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        vendor: str | None = None,
        retry_after: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param
        self.vendor = vendor
        self.retry_after = retry_after
        self.extra_headers = headers  # sent with the error besides x-should-retry (e.g. x-ratelimit-*)
        self.vendor_status: int | None = None  # the vendor's own HTTP status, when it answered this error

    @property
    def clients_mistake(self) -> bool:
        """A 4xx the client fixes by changing its request (a rate limit is waited out instead)."""
        return 400 <= self.status < 500 and not self.retryable

    def body(self, redact: Callable[[str], str] = str) -> dict[str, Any]:
        """The ErrorResponse body; `redact` scrubs the message (which may quote a vendor) of secrets."""
        return {
            "error": {
                "message": redact(self.message),
                "type": self.type,
                "code": self.code,
                "param": self.param,
                "vendor": self.vendor,
            }
        }

    def headers(self) -> dict[str, str]:
        headers = {"x-should-retry": "true" if self.retryable else "false"}
        wait = self.retry_after
        if wait is not None and (isinstance(wait, int) or math.isfinite(wait)):
            headers["retry-after"] = str(round(min(max(wait, 0), MAX_RETRY_AFTER)))
        if self.extra_headers:
            headers |= self.extra_headers
        return headers


class BadRequest(GatewayError):
    """400: the request is well-formed but cannot be served as asked (a parameter the vendor
    lacks, a value out of the vendor's range, a vendor's own rejection)."""

    status = 400
    type = "invalid_request_error"


class UnsupportedParameter(BadRequest):
    """A parameter the selected vendor can neither honour nor have emulated."""

    def __init__(self, param: str, vendor: str, why: str) -> None:
        super().__init__(
            f"parameter '{param}' is not supported for vendor '{vendor}': {why}",
            code="unsupported_parameter",
            param=param,
            vendor=vendor,
        )


class ParameterOutOfRange(BadRequest):
    """A value the contract allows but the selected vendor does not (it is never clamped)."""

    def __init__(self, param: str, vendor: str, value: Any, allowed: str) -> None:
        super().__init__(
            f"parameter '{param}' = {value} is out of range for vendor '{vendor}', which accepts {allowed}",
            code="parameter_out_of_range",
            param=param,
            vendor=vendor,
        )


class AuthenticationFailed(GatewayError):
    status = 401
    type = "authentication_error"


class PermissionDenied(GatewayError):
    status = 403
    type = "permission_error"


class NotFound(GatewayError):
    status = 404
    type = "not_found_error"


class Conflict(GatewayError):
    """409: the object's state forbids the change (an account that exists, a key revoked already)."""

    status = 409
    type = "conflict_error"


class MethodNotAllowed(GatewayError):
    status = 405
    type = "invalid_request_error"


class RequestTimeout(GatewayError):
    """The client took too long to send its request body."""

    status = 408
    type = "invalid_request_error"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"


class UnsupportedMediaType(GatewayError):
    status = 415
    type = "invalid_request_error"


class HeaderFieldsTooLarge(GatewayError):
    """The request's head (request line and headers) is over the configured limit."""

    status = 431
    type = "invalid_request_error"


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"
    retryable = True


class RequestTooLarge(RateLimited):
    """A request that may use more than a per-minute limit allows at all: no wait makes it fit."""

    retryable = False


class QuotaExceeded(RateLimited):
    """A budget is spent: no retry helps until its period ends or the limit is raised."""

    type = "insufficient_quota"
    retryable = False


class VendorFailed(GatewayError):
    """The vendor answered with an error or with something we cannot read."""

    status = 502
    type = "vendor_error"
    retryable = True


class VendorCredentialsRejected(VendorFailed):
    """The vendor refused the gateway's own key: the operator must act, a client retry cannot help."""

    retryable = False


class GatewayOverloaded(GatewayError):
    """The gateway itself is at its limit of requests in flight."""

    status = 503
    type = "overloaded_error"
    retryable = True


class VendorNotReady(GatewayError):
    """A vendor that cannot serve yet (the local model still loading) or at all (it failed to load)."""

    status = 503
    type = "overloaded_error"
    retryable = True


class StorageUnavailable(GatewayError):
    """The gateway's own database cannot answer (checking a new key, reading usage)."""

    status = 503
    type = "overloaded_error"
    retryable = True


class LimitsUnavailable(GatewayError):
    """The request is under limits this gateway cannot count now (their store is away, with
    limits_on_store_failure = closed) or cannot count exactly at all (several workers, no Redis)."""

    status = 503
    type = "overloaded_error"
    retryable = True


class ShuttingDown(GatewayError):
    """The gateway stopped before this request could be answered: another instance (or this one,
    restarted) can serve it."""

    status = 503
    type = "overloaded_error"
    retryable = True


class VendorTimeout(GatewayError):
    status = 504
    type = "vendor_timeout"
    retryable = True


class ValidationFailed(Exception):
    """422: the body is not JSON or does not match the schema (or a query parameter its schema):
    the spec's HTTPValidationError, listing every problem in `detail` (the seed's FastAPI shape),
    and the same as one OpenAI-style `error`, since OpenAI's SDKs read only `body.error` (the Node
    SDK otherwise says "422 status code (no body)")."""

    # The error's `code`: one machine-readable reason for every 422 (`detail` says what in particular).
    code = "invalid_request_body"
    # Problems the `error.message` spells out; `detail` lists every one.
    MESSAGE_PROBLEMS = 20

    def __init__(self, detail: list[dict[str, Any]], code: str | None = None) -> None:
        super().__init__(detail[0]["msg"] if detail else "invalid request body")
        self.detail = detail
        if code is not None:  # a reason of its own (an administrative value that cannot be used)
            self.code = code
        self.extra_headers: dict[str, str] | None = None  # as GatewayError's (x-ratelimit-*: the planner's 422s)

    @classmethod
    def in_body(cls, problems: Iterable[tuple[tuple[str | int, ...], str]]) -> ValidationFailed:
        """The 422 of problems a rule found in the body, each (where in the body, what is wrong)."""
        return cls([{"loc": ["body", *loc], "msg": msg, "type": "value_error"} for loc, msg in problems])

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail, "error": {
            "message": self.message(),
            "type": BadRequest.type,
            "code": self.code,
            "param": field_name(self.detail[0]["loc"]) if self.detail else None,
            "vendor": None,
        }}

    def headers(self) -> dict[str, str]:
        return {"x-should-retry": "false"} | (self.extra_headers or {})  # the same request fails the same way

    def message(self) -> str:
        """Every failing field and why, e.g. "invalid request: temperature: 3 is greater than the
        maximum of 2; bogus: Extra inputs are not permitted"."""
        shown = self.detail[: self.MESSAGE_PROBLEMS]
        # A problem of the body (or query) as a whole is located by its first step alone.
        parts = [f"{field_name(d['loc']) or d['loc'][0]}: {d['msg']}" for d in shown]
        more = len(self.detail) - len(shown)
        if more:
            parts.append(f"and {more} more problem{'s' if more > 1 else ''} (see detail)")
        return "invalid request: " + "; ".join(parts)


def field_name(loc: list[str | int]) -> str | None:
    """The field a problem's `loc` points at, written as OpenAI writes `param`: the location
    (`body`, `query`...) left out, list items as `[i]`, nested keys joined by dots, e.g.
    ["body", "prompt", 2] -> "prompt[2]"; None for the body (or query) as a whole."""
    name = ""
    for step in loc[1:]:
        name += f"[{step}]" if isinstance(step, int) else (f".{step}" if name else str(step))
    return name or None


def invalid_field(loc: tuple[str | int, ...], msg: str, type_: str, value: Any = None) -> ValidationFailed:
    """One 422 problem, for cross-field rules the schema cannot express (e.g. best_of >= n)."""
    entry: dict[str, Any] = {"loc": ["body", *loc], "msg": msg, "type": type_}
    if value is not None:
        entry["input"] = value
    return ValidationFailed([entry])


# Statuses that Connexion or Starlette raise themselves (missing key, wrong method, unknown path,
# wrong content type), rendered in our error body instead of problem+json.
_BY_STATUS: dict[int, type[GatewayError]] = {
    400: BadRequest,
    401: AuthenticationFailed,
    403: PermissionDenied,
    404: NotFound,
    405: MethodNotAllowed,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
}
_MESSAGES = {
    # Worded so that the secret scrubber (gateway/core/redaction.py) finds no header value in it:
    # "Authorization: Bearer <key>" reads as a leaked header and reaches the client redacted.
    401: "missing API key: send your key in x-api-key, or in Authorization as a bearer token",
    404: "no such path",
    405: "method not allowed on this path",
}


def from_http_status(status: int, detail: str | None) -> GatewayError:
    """A GatewayError for an HTTP exception raised by the framework."""
    cls = _BY_STATUS.get(status, GatewayError)
    message = detail or _MESSAGES.get(status) or f"HTTP {status}"
    if status == 401 and detail in (None, "No authorization token provided"):
        message = _MESSAGES[401]
    return cls(message)
