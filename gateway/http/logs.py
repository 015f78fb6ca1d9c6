"""Logging set-up, with secrets scrubbed from every line as a last line of defence: vendor keys
(known from the configuration), and anything shaped like an API key or an auth header
(core/redaction.py, the same scrubbing as every error that reaches a client).

Two formats (GATEWAY_LOG_FORMAT): `text`, the default, and `json`: one JSON object per line for
every logger, uvicorn's included (`time`, `level`, `logger`, `message`, the record's structured
`fields` such as an access line's, and `exception` with its traceback). Structured fields are
scrubbed one by one, before they are encoded, so a scrubbed value never breaks the JSON.

A completion's access line is written on every request: `Lines` writes it without a LogRecord, its
handler's filter and its formatter's lookups, as the same line logging would write (the same
formatter spells it), whenever the log is as `configure` set it up; otherwise through logging.
Such a line is scrubbed whole first, one scan: each of its strings (the message, the fields'
values) stands in it as it is, between a separator and a space or quote that no secret's pattern
reaches across, so a line that scrubbing leaves alone has nothing secret in any of them. Only a
line that scrubbing would change has its strings scrubbed one by one, as a record's would be.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
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


class _Stamps:
    """A line's time as text. The whole second's part is spelled once per second (most lines share
    it), into a template that only the milliseconds fill."""

    __slots__ = ("_spell", "_separator", "_suffix", "_second", "_template")

    def __init__(self, spell: Callable[[int], str], separator: str, suffix: str = "") -> None:
        self._spell, self._separator, self._suffix = spell, separator, suffix
        self._second = -1
        self._template = ""

    def text(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            spelled = self._spell(second).replace("%", "%%")
            self._second, self._template = second, f"{spelled}{self._separator}%03d{self._suffix}"
        # %d truncates as LogRecord's int() does for its msecs
        return self._template % ((created - second) * 1000)


def _local_second(second: int) -> str:  # logging.Formatter's default time, without its milliseconds
    return time.strftime(logging.Formatter.default_time_format, time.localtime(second))


def _utc_second(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")


class TextFormatter(logging.Formatter):
    """The classic line, with a record's structured fields after the message as key=value."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._redact = redact
        self._stamps = _Stamps(_local_second, ",").text

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, FIELDS, None)
        if fields:
            line += _key_values(scrubbed(fields, self._redact))
        return line

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None or self.converter is not time.localtime:
            return super().formatTime(record, datefmt)
        return self._stamps(record.created)

    def formatException(self, ei: Any) -> str:
        return self._redact(super().formatException(ei))

    def line(self, created: float, levelname: str, name: str, message: str, fields: dict[str, Any]) -> str:
        """What `format` gives for a record of these, `message` not yet scrubbed and no exception."""
        head = f"{self._stamps(created)} {levelname} {name}: "
        line = head + message + (_key_values(fields) if fields else "")
        # Every string of the line is in it as it is, so when scrubbing the whole line leaves it
        # alone, scrubbing each would have too (see the module's docstring).
        if self._redact(line) == line:
            return line
        return head + self._redact(message) + (_key_values(scrubbed(fields, self._redact)) if fields else "")


def _key_values(fields: dict[str, Any]) -> str:
    return " " + " ".join([f"{key}={'' if value is None else value}" for key, value in fields.items()])


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact
        self._time = _Stamps(_utc_second, ".", "Z").text

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

    def line(self, created: float, levelname: str, name: str, message: str, fields: dict[str, Any]) -> str:
        """What `format` gives for a record of these, `message` not yet scrubbed and no exception."""
        entry = {"time": self._time(created), "level": levelname.lower(), "logger": name, "message": message}
        if fields:
            entry |= fields
        line = orjson.dumps(entry, default=str).decode()
        # Every string is in the line as it is unless JSON escaped a character of it, which leaves a
        # backslash: without one, when scrubbing the whole line leaves it alone, scrubbing each
        # string would have too (see the module's docstring).
        if "\\" not in line and self._redact(line) == line:
            return line
        entry["message"] = self._redact(message)
        if fields:
            entry |= scrubbed(fields, self._redact)
        return orjson.dumps(entry, default=str).decode()


class _Direct:
    """The log as `configure` set it up: the root logger's one handler and its formatter."""

    __slots__ = ("handlers", "handler", "formatter")

    def __init__(self, handler: logging.StreamHandler[Any], formatter: TextFormatter | JsonFormatter) -> None:
        self.handlers = [handler]  # what the root logger's handlers must still be
        self.handler = handler
        self.formatter = formatter


_direct: _Direct | None = None


class Lines:
    """Structured lines of one logger (the access log's), each a message and its fields, written as
    logging would write them (see the module's docstring). The logger's level decides, as for any
    line; a log set up otherwise (other handlers, as tests capturing records add) gets a record."""

    def __init__(self, name: str, clock: Callable[[], float] = time.time) -> None:
        self.logger = logging.getLogger(name)
        self._clock = clock

    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)

    def info(self, message: str, fields: dict[str, Any]) -> None:
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        direct = _direct
        if direct is None or logging.root.handlers != direct.handlers or logger.handlers or logger.filters:
            logger.info("%s", message, extra={FIELDS: fields})
            return
        handler = direct.handler
        try:
            line = direct.formatter.line(self._clock(), "INFO", logger.name, message, fields) + handler.terminator
            with handler.lock:  # as Handler.handle: lines written from other threads do not interleave
                stream = handler.stream
                stream.write(line)
                stream.flush()
        except Exception:  # a failing stream is the handler's to report (handleError), never the caller's
            logger.info("%s", message, extra={FIELDS: fields})


def configure(level: str, fmt: str, redact: Redactor) -> None:
    """Set up this process's logging; again after uvicorn configured its own loggers (it replaces
    their handlers), which is why it may run more than once."""
    global _direct
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
    root = logging.getLogger().handlers
    plain = len(root) == 1 and type(root[0]) is logging.StreamHandler and root[0].level <= logging.INFO
    _direct = _Direct(root[0], ours) if plain else None
