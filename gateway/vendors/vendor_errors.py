"""A vendor's failure as the gateway's error: who was at fault, what to do, never a secret.

The vendor's own text (its error message, a transport error's description) is scrubbed of every
key the vendor's deployments use and clipped before it goes into a message; a vendor's Retry-After
is read in every form RFC 9110 allows and bounded.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import orjson

from gateway.core.config import VendorConfig
from gateway.core.errors import (
    MAX_RETRY_AFTER,
    BadRequest,
    GatewayError,
    NotFound,
    RateLimited,
    VendorCredentialsRejected,
    VendorFailed,
    VendorTimeout,
    clip,
)
from gateway.core.redaction import REDACTED
from gateway.vendors.transport.client import TransportError
from gateway.vendors.untrusted import MESSAGE_LIMIT

log = logging.getLogger("gateway.vendors")

# Retry-After's delay-seconds: digits (a fraction tolerated, as some servers send one). Python's
# float() would also read "1_0" as 10, "1e3", "inf", "+5" and surrounding spaces: none is a delay.
_DELAY = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def error_message(body: bytes) -> str:
    """The human part of a vendor's error body. OpenAI (`{"error": {"message"}}`), Anthropic
    (`{"type": "error", "error": {"type", "message"}}`) and Gemini (`{"error": {"code", "message",
    "status"}}`) all put it in `error.message`; some compatible servers (vLLM) at the top. A body
    that is not JSON is its text. Not yet clipped or redacted: `vendor_error` does both."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode(errors="replace")
    return payload_message(payload)


def payload_message(payload: Any) -> str:
    """The message of a vendor's error object; "" when it has none that is text (the object
    itself is never quoted: it is the vendor's payload, of any size)."""
    if not isinstance(payload, dict):
        return ""
    error = payload.get("error")
    for message in (error.get("message") if isinstance(error, dict) else error, payload.get("message"),
                    payload.get("detail")):
        if isinstance(message, str) and message.strip():
            return message
    return ""


def vendor_error(config: VendorConfig, status: int, message: str, retry_after: str | None = None) -> GatewayError:
    """A vendor's error answer, as the error the client gets: whose fault, and what to do."""
    name = config.name
    message = redact(config, message) or f"HTTP {status}"
    if status in (401, 403):
        # The client cannot fix the gateway's credentials; the vendor's text may quote the key.
        return VendorCredentialsRejected("vendor rejected the gateway's credentials", code="vendor_auth", vendor=name)
    if status == 404:
        return NotFound(f"vendor '{name}': {message}", code="vendor_not_found", vendor=name)
    if status == 429:
        return RateLimited(f"vendor '{name}' rate limit: {message}", code="vendor_rate_limited", vendor=name,
                           retry_after=retry_after_seconds(retry_after))
    if 400 <= status < 500:
        return BadRequest(f"vendor '{name}' rejected the request: {message}", code="vendor_rejected", vendor=name)
    return VendorFailed(f"vendor '{name}' failed (HTTP {status}): {message}", code="vendor_error", vendor=name,
                        retry_after=retry_after_seconds(retry_after))


def transport_error(config: VendorConfig, exc: BaseException, deployment: str) -> GatewayError:
    """A failure to talk to the vendor at all (vendors/transport/client.py: a TimeoutError or a
    TransportError): 504 when it was slow, 502 when it broke. The client is told what happened,
    never where: the address is in the log, with the deployment's name."""
    if isinstance(exc, TimeoutError):
        return VendorTimeout(f"vendor '{config.name}' did not answer in time", code="vendor_timeout",
                             vendor=config.name)
    log.warning("vendor %s, deployment %s: %s", config.name, deployment,
                " ".join(clip(str(exc), MESSAGE_LIMIT).split()))
    reason = exc.reason if isinstance(exc, TransportError) else type(exc).__name__
    return VendorFailed(f"cannot talk to vendor '{config.name}': {redact(config, reason)}", code="vendor_unreachable",
                        vendor=config.name)


def redact(config: VendorConfig, text: str) -> str:
    """A vendor's text for a message: every key of the vendor's deployments scrubbed, and every
    deployment's address named by the deployment's name instead, then clipped to MESSAGE_LIMIT
    characters, on one line. Scrubbed before it is clipped, so a cut never leaves part of a key.
    (The error renderer scrubs every message again, for key-shaped strings of any origin.)"""
    secrets = sorted(config.secrets, key=len, reverse=True)  # a key containing another is scrubbed whole
    addresses = _addresses(config)
    longest = max(map(len, [*secrets, *addresses]), default=0)
    text = text[: MESSAGE_LIMIT + longest + 1]  # a key starting within the limit ends in this
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    for address, name in addresses.items():
        text = text.replace(address, name)
    return " ".join(clip(text, MESSAGE_LIMIT).split())


def _addresses(config: VendorConfig) -> dict[str, str]:
    """Each deployment's URL, host and port, and host (longest first), with what replaces it."""
    found: dict[str, str] = {}
    for index, target in enumerate(config.targets):
        name = f"<deployment {target.name or index}>"
        parts = urlsplit(target.base_url)
        for address in (target.base_url, parts.netloc, parts.hostname or ""):
            if len(address) >= 4:
                found.setdefault(address, name)
    return dict(sorted(found.items(), key=lambda item: len(item[0]), reverse=True))


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """A vendor's Retry-After (RFC 9110): seconds, or an HTTP-date (IMF-fixdate or an obsolete
    form) counted from `now`. A header that is neither (a sign, an exponent, "1_0", "inf") is
    ignored (None); a date already past is 0; anything longer than MAX_RETRY_AFTER is that."""
    if value is None:
        return None
    if _DELAY.fullmatch(value):
        return min(float(value), MAX_RETRY_AFTER)  # digits without end are float("inf"): the cap
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, with no claim about the local zone
        when = when.replace(tzinfo=UTC)
    seconds = max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
    return min(seconds, MAX_RETRY_AFTER)
