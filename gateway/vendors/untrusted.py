"""Reading what a vendor sent: every number, size and text is checked before the gateway uses it.

A vendor's answer is untrusted input, like a client's request. Each helper takes one decoded JSON
value and returns it in the type the gateway works with, or raises `Malformed` saying which field
was wrong and how, never quoting the value (it may be huge, or repeat the gateway's own key). The
adapters turn `Malformed` into their own failure: VendorFailed (a 502, or an error event once a
stream has started), or EngineError for the embedded model.

A missing or null field reads as "not given" (an empty text, a count of 0, no list), as the
vendors' own SDKs read it; a field of the wrong type or out of range is refused.
"""

from __future__ import annotations

import json
import math
from typing import Any

from gateway.core.completion import MAX_USAGE_TOKENS, Usage

# How many alternatives per token a vendor's logprobs may carry: the contract asks for at most 5,
# OpenAI's and Gemini's APIs give at most 20. Further ones are ignored, unread.
MAX_ALTERNATIVES = 20
# How long one token may be, in bytes (or characters). Vocabularies' longest tokens (runs of
# spaces or dashes in code vocabularies) are far shorter; a "token" longer than this is not one.
MAX_TOKEN_BYTES = 1024
# Entries kept of a usage-details object (`cached_tokens`, `reasoning_tokens`...), and the length of
# their names: vendors send a handful; the rest is not passed on.
MAX_DETAILS = 16
MAX_DETAIL_NAME = 64
# How much of a vendor's own text (an error message) an error repeats, in characters: enough to read
# the vendor's reason, never a payload (vendors/transport/http.py `redact`).
MESSAGE_LIMIT = 500
# The finish reasons of the contract; a vendor's other ones (vLLM's "abort", a new reason) read as "stop".
FINISH_REASONS = frozenset({"stop", "length", "content_filter"})


class Malformed(ValueError):
    """A vendor's value is not what its protocol says. The message names the field, not the value."""


class Reported(Exception):
    """The vendor reported a failure in an answer that is otherwise well-formed (a stream's error
    event). `message` is the vendor's own, not yet clipped nor redacted."""

    def __init__(self, message: str) -> None:
        super().__init__("the vendor reported an error")
        self.message = message


def kind(value: Any) -> str:
    """What a JSON value is, for a message that must not quote it."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)  # fmt: skip


def obj(value: Any, what: str) -> dict[str, Any]:
    """A JSON object (null reads as an empty one)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"{what} is {kind(value)}, not an object")
    return value


def items(value: Any, what: str) -> list[Any]:
    """A JSON array (null reads as an empty one)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed(f"{what} is {kind(value)}, not a list")
    return value


def text(value: Any, what: str, limit: int | None = None) -> str:
    """A string (null reads as ""), of at most `limit` characters when one is given."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Malformed(f"{what} is {kind(value)}, not a string")
    if limit is not None and len(value) > limit:
        raise Malformed(f"{what} is longer than {limit} characters")
    return value


def count(value: Any, what: str) -> int:
    """A token count: a whole number from 0 to MAX_USAGE_TOKENS (null reads as 0). A float is
    taken when it is whole (12.0: some servers keep counts as floats), never a fraction or a boolean."""
    if value is None:
        return 0
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise Malformed(f"{what} is {kind(value)}, not a whole number")
    if not 0 <= value <= MAX_USAGE_TOKENS:
        raise Malformed(f"{what} is out of range (0 to {MAX_USAGE_TOKENS})")
    return value


def index(value: Any, what: str, bound: int) -> int:
    """A choice's index within a vendor call that asked for `bound` choices: 0 <= index < bound."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise Malformed(f"{what} is {kind(value)}, not a whole number")
    if not 0 <= value < bound:
        raise Malformed(f"{what} is out of range: the call asked for {bound} choice(s)")
    return value


def logprob(value: Any, what: str) -> float:
    """A log-probability: a finite number, at most 0."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise Malformed(f"{what} is {kind(value)}, not a number")
    number = float(value) if isinstance(value, float) or abs(value) <= 2**53 else math.inf  # no OverflowError
    if not (math.isfinite(number) and number <= 0):
        raise Malformed(f"{what} is not a log-probability (a finite number, at most 0)")
    return number


def finish_reason(value: Any, what: str) -> str | None:
    """A contract finish reason, or None while the choice goes on."""
    if value is None:
        return None
    reason = text(value, what)
    return reason if reason in FINISH_REASONS else "stop"


def token_bytes(value: Any, what: str) -> bytes:
    """A token's bytes, written as a list of byte values (llama.cpp, OpenAI's chat logprobs)."""
    values = items(value, what)
    if len(values) > MAX_TOKEN_BYTES:
        raise Malformed(f"{what} is longer than {MAX_TOKEN_BYTES} bytes")
    if not all(type(b) is int and 0 <= b <= 255 for b in values):
        raise Malformed(f"{what} holds something other than byte values (0 to 255)")
    return bytes(values)


def token(value: Any, what: str) -> str:
    return text(value, what, MAX_TOKEN_BYTES)


def details(value: Any, what: str) -> dict[str, int] | None:
    """A usage-details object: the entries that are counts (others, e.g. nulls, are left out),
    at most MAX_DETAILS of them. A number that is not a count is refused like any usage count."""
    kept: dict[str, int] = {}
    for name, raw in obj(value, what).items():
        if len(kept) == MAX_DETAILS:
            break
        if isinstance(raw, int | float) and not isinstance(raw, bool) and len(name) <= MAX_DETAIL_NAME:
            kept[name] = count(raw, f"an entry of {what}")  # its name is the vendor's: not quoted
    return kept or None


def usage(prompt: int, completion: int, what: str, prompt_details: dict[str, int] | None = None,
          completion_details: dict[str, int] | None = None) -> Usage:
    """A Usage from counts already read; their sums (a vendor counting its cache apart) are
    held to the same maximum."""
    return Usage(count(prompt, f"{what} (prompt)"), count(completion, f"{what} (completion)"),
                 prompt_details, completion_details)


def legacy_logprobs(value: Any, what: str) -> dict[str, list[Any]] | None:
    """Logprobs in the contract's (legacy) shape, checked entry by entry: four lists of one entry
    per token, at most MAX_ALTERNATIVES alternatives each."""
    if value is None:
        return None
    raw = obj(value, what)
    columns = {name: items(raw.get(name), f"{what}.{name}")
               for name in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
    if len({len(column) for column in columns.values()}) != 1:
        raise Malformed(f"{what}: tokens, token_logprobs, top_logprobs and text_offset differ in length")
    return {
        "tokens": [token(t, f"{what}.tokens[]") for t in columns["tokens"]],
        "token_logprobs": [None if lp is None else logprob(lp, f"{what}.token_logprobs[]")
                           for lp in columns["token_logprobs"]],
        "top_logprobs": [None if top is None else alternatives(top, f"{what}.top_logprobs[]")
                         for top in columns["top_logprobs"]],
        "text_offset": [offset(at, f"{what}.text_offset[]") for at in columns["text_offset"]],
    }


def alternatives(value: Any, what: str) -> dict[str, float]:
    """One token's alternatives {token: logprob}, the first MAX_ALTERNATIVES of them."""
    kept: dict[str, float] = {}
    for name, lp in obj(value, what).items():
        if len(kept) == MAX_ALTERNATIVES:
            break
        kept[token(name, f"{what} token")] = logprob(lp, f"{what} logprob")
    return kept


def offset(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise Malformed(f"{what} is {kind(value)}, not a character offset")
    return value


# What reading a vendor's decoded JSON can raise besides Malformed (ValueError), should a helper
# meet a shape it does not expect: the adapters treat them alike, as the vendor's fault.
READ_ERRORS = (ValueError, LookupError, TypeError, AttributeError)


def why(exc: BaseException) -> str:
    """What was wrong, for a message: a Malformed's own words; of anything else only its kind (its
    text may quote the vendor's data)."""
    if isinstance(exc, json.JSONDecodeError):  # orjson's too
        return "not JSON"
    return str(exc) if isinstance(exc, Malformed) else f"unreadable ({type(exc).__name__})"
