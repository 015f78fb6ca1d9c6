"""Logging set-up, with secrets scrubbed from every line as a last line of defence: vendor keys
(known from the configuration), and anything shaped like an API key or an auth header."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

_SHAPES = [
    r"\b(authorization|x-api-key|x-goog-api-key)([\"']?\s*[:=]\s*[\"']?)(bearer\s+)?[^\s\"',;}]+",
    r"\bsk-[A-Za-z0-9_-]{8,}",
]


class RedactSecrets(logging.Filter):
    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        exact = [re.escape(s) for s in secrets if s]
        self._pattern = re.compile("|".join(exact + _SHAPES), re.IGNORECASE)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self._pattern.sub(_replacement, message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def _replacement(match: re.Match[str]) -> str:
    if match.lastindex and match.group(1):  # keep the header name, drop its value
        return f"{match.group(1)}{match.group(2)}[redacted]"
    return "[redacted]"


def configure(level: str, secrets: Iterable[str]) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One INFO line per vendor request (httpx) or migration step (alembic) is noise, and on the
    # hot path a cost; they still speak at debug level.
    if level.lower() != "debug":
        for noisy in ("httpx", "alembic"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    redact = RedactSecrets(secrets)
    for name in ("", "uvicorn", "uvicorn.error", "uvicorn.access"):
        for handler in logging.getLogger(name).handlers:
            handler.addFilter(redact)
