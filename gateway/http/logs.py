"""Logging set-up, with secrets scrubbed from every line as a last line of defence: vendor keys
(known from the configuration), and anything shaped like an API key or an auth header
(core/redaction.py, the same scrubbing as every error that reaches a client).

Two formats (GATEWAY_LOG_FORMAT): `text`, the default, and `json`: one JSON object per line for
every logger, uvicorn's included (`time`, `level`, `logger`, `message`, the record's structured
`fields` such as an access line's, and `exception` with its traceback). Structured fields are
scrubbed one by one, before they are encoded, so a scrubbed value never breaks the JSON.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson

from gateway.core.redaction import Redactor

FIELDS = "fields"  # the LogRecord attribute (`extra={"fields": {...}}`) holding a line's structured data
# The loggers with handlers of their own: ours go through the root's; uvicorn's have theirs.
LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access")


class RedactSecrets(logging.Filter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        # The message is formatted once here, scrubbed, and kept so (formatters ask for it again).
        record.msg, record.args = self._redact(record.getMessage()), None
        return True


def scrubbed(fields: dict[str, Any], redact: Redactor) -> dict[str, Any]:
    """`fields` with every string value scrubbed; one scan of them all when nothing is secret."""
    texts = [value for value in fields.values() if isinstance(value, str)]
    joined = "\n".join(texts)
    if redact(joined) == joined:
        return fields
    return {key: redact(value) if isinstance(value, str) else value for key, value in fields.items()}


class TextFormatter(logging.Formatter):
    """The classic line, with a record's structured fields after the message as key=value."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, FIELDS, None)
        if fields:
            line += " " + " ".join(f"{key}={'' if value is None else value}"
                                   for key, value in scrubbed(fields, self._redact).items())
        return line

    def formatException(self, ei: Any) -> str:
        return self._redact(super().formatException(ei))


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact
        self._second = -1  # the whole second `_prefix` spells, reused by every line within it
        self._prefix = ""

    def _time(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            self._second, self._prefix = second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{self._prefix}.{int((created - second) * 1000):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self._time(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, FIELDS, None)
        if fields:
            entry |= scrubbed(fields, self._redact)
        if record.exc_info:
            entry["exception"] = self._redact(self.formatException(record.exc_info))
        elif record.exc_text:
            entry["exception"] = self._redact(record.exc_text)
        return orjson.dumps(entry, default=str).decode()


def configure(level: str, fmt: str, redact: Redactor) -> None:
    """Set up this process's logging; again after uvicorn configured its own loggers (it replaces
    their handlers), which is why it may run more than once."""
    # What no line of ours shows is not collected for each record (the logging HOWTO's
    # "Optimization"): a completion's access line is on the hot path.
    logging._srcfile = None  # type: ignore[attr-defined]  # the caller's file and line
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging.basicConfig(level=level.upper())
    # One INFO line per vendor request (httpx) or migration step (alembic) is noise, and on the
    # hot path a cost; they still speak at debug level.
    if level.lower() != "debug":
        for noisy in ("httpx", "alembic"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    scrub = RedactSecrets(redact)
    ours = TextFormatter(redact) if fmt == "text" else JsonFormatter(redact)
    for name in LOGGERS:
        for handler in logging.getLogger(name).handlers:
            for old in [f for f in handler.filters if isinstance(f, RedactSecrets)]:
                handler.removeFilter(old)
            handler.addFilter(scrub)
            # uvicorn's own lines keep uvicorn's look in text; in JSON every line is JSON.
            if fmt == "json" or name == "":
                handler.setFormatter(ours)
