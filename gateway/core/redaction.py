"""Scrubbing secrets out of text that leaves the gateway: error bodies, stream error events, log
lines. Every configured vendor key, and anything shaped like an API key or an auth header's value,
becomes `[redacted]` — a vendor that quotes the request's Authorization header back in an error
must not hand the gateway's key to a client.

One `Redactor` per gateway, built from its settings, serves every path: the HTTP error renderer,
the SSE error event, and the log filter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[redacted]"
# Key-shaped strings whoever they belong to: an auth header and its value (a proxy's Basic
# credentials too); OpenAI/Anthropic/our own keys (sk-...); Google API keys (AIza + 35
# characters); a bare Bearer token.
_SHAPES = [
    r"\b(authorization|x-api-key|x-goog-api-key|api-key|api_key)([\"']?\s*[:=]\s*[\"']?)((?:bearer|basic)\s+)?[^\s\"',;}]+",
    r"\bsk-[A-Za-z0-9_-]{8,}",
    r"\bAIza[0-9A-Za-z_-]{35}\b",
    r"(?<=bearer )[A-Za-z0-9._~+/=-]{12,}",
]
# A text none of the shapes can match lacks all of these (case-folded); finding none of them (nor a
# known secret) is much cheaper than running the pattern, and most log lines have none.
_TRIGGERS = ("authorization", "api-key", "api_key", "sk-", "aiza", "bearer ")


MIN_SECRET = 8  # characters: shorter "secrets" are no keys, and scrubbing them would garble every text


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so that a key containing another is scrubbed whole.
        known = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)
        self._pattern = re.compile("|".join([re.escape(s) for s in known] + _SHAPES), re.IGNORECASE)
        self._triggers = (*_TRIGGERS, *(s.casefold() for s in known))

    def __call__(self, text: str) -> str:
        lowered = text.casefold()
        for trigger in self._triggers:  # a loop, not any() over a generator: every log line comes here
            if trigger in lowered:
                return self._pattern.sub(_replacement, text)
        return text


def _replacement(match: re.Match[str]) -> str:
    if match.lastindex and match.group(1):  # keep the header name (or "Bearer"), drop its value
        return f"{match.group(1)}{match.group(2)}{REDACTED}"
    return REDACTED
