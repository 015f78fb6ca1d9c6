"""Logging set-up, with secrets scrubbed from every line as a last line of defence: vendor keys
(known from the configuration), and anything shaped like an API key or an auth header
(core/redaction.py, the same scrubbing as every error that reaches a client)."""

from __future__ import annotations

import logging

from gateway.core.redaction import Redactor


class RedactSecrets(logging.Filter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self._redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def configure(level: str, redact: Redactor) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One INFO line per vendor request (httpx) or migration step (alembic) is noise, and on the
    # hot path a cost; they still speak at debug level.
    if level.lower() != "debug":
        for noisy in ("httpx", "alembic"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    scrub = RedactSecrets(redact)
    for name in ("", "uvicorn", "uvicorn.error", "uvicorn.access"):
        for handler in logging.getLogger(name).handlers:
            handler.addFilter(scrub)
