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
Its strings (the message, the fields' string values) are scrubbed before the line is spelled, as
a record's are, but in one scan: they are joined by newlines, which no secret's pattern needs to
reach across, so when scrubbing the joined text leaves it alone, scrubbing each would have too;
only otherwise is each scrubbed alone. Strings a scan found clean are remembered (a bounded set:
the next line's account, vendor, model and message are mostly the same), and the fields a `Lines`
names `verbatim` (ids the gateway made, numbers, fixed words) are not scanned at all. A JSON line's
fields are encoded as one object, spliced after the line's own keys.

The log's stream (http/observe/log_stream.py) writes access lines together, at most `COALESCE_SECONDS`
after the first of them or as soon as `COALESCE_BYTES` wait: a line-buffered stream makes a
system call of every line, a large part of a request's CPU at concurrency 1 (bench.observability;
docs/performance.md). Every other write to it (a record of any logger
whose handler shares the stream, warnings and errors among them) first writes what waits, so
lines keep their order; at exit what waits is written. A process killed outright loses at most
the last `COALESCE_SECONDS` of access lines; the ledger, not the log, is the record of usage.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from typing import Any

import orjson

from gateway.core.redaction import Redactor
from gateway.http.observe.log_stream import CoalescedStream

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


# Milliseconds as a line spells them ("%03d" of what LogRecord's int() truncation gives); the last
# is for a float product that rounds up to 1000.
_MILLIS = tuple(f"{ms:03d}" for ms in range(1001))


class _Stamps:
    """A line's time as text. The whole second's part is spelled once per second (most lines share
    it), then only the milliseconds are added, from a table."""

    __slots__ = ("_spell", "_separator", "_suffix", "_second", "_head")

    def __init__(self, spell: Callable[[int], str], separator: str, suffix: str = "") -> None:
        self._spell, self._separator, self._suffix = spell, separator, suffix
        self._second = -1
        self._head = ""

    def text(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            self._second, self._head = second, self._spell(second) + self._separator
        return self._head + _MILLIS[int((created - second) * 1000)] + self._suffix


def _local_second(second: int) -> str:  # logging.Formatter's default time, without its milliseconds
    return time.strftime(logging.Formatter.default_time_format, time.localtime(second))


def _utc_second(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")


class TextFormatter(logging.Formatter):
    """The classic line, with a record's structured fields after the message as key=value."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._redact = redact
        self._clean: set[str] = set()
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

    def line(self, created: float, levelname: str, name: str, message: str, fields: dict[str, Any],
             verbatim: Verbatim | None = None) -> str:
        """What `format` gives for a record of these, `message` not yet scrubbed and no exception;
        the `verbatim` fields are not scrubbed."""
        message, fields = _scrubbed_line(message, fields, verbatim or NO_VERBATIM, self._redact, self._clean)
        return f"{self._stamps(created)} {levelname} {name}: {message}" + (_key_values(fields) if fields else "")


def _key_values(fields: dict[str, Any]) -> str:
    return " " + " ".join([f"{key}={'' if value is None else value}" for key, value in fields.items()])


_HEAD_KEYS = frozenset(("time", "level", "logger", "message"))  # a line's own keys, before its fields'


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact
        self._clean: set[str] = set()
        self._heads: dict[tuple[str, str], str | None] = {}  # (level, logger) -> what follows a line's time
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

    def line(self, created: float, levelname: str, name: str, message: str, fields: dict[str, Any],
             verbatim: Verbatim | None = None) -> str:
        """What `format` gives for a record of these, `message` not yet scrubbed and no exception;
        the `verbatim` fields are not scrubbed."""
        message, fields = _scrubbed_line(message, fields, verbatim or NO_VERBATIM, self._redact, self._clean)
        head = self._heads.get((levelname, name))
        if head is None:
            head = self._heads[(levelname, name)] = (f'"level":{orjson.dumps(levelname.lower()).decode()},'
                                                    f'"logger":{orjson.dumps(name).decode()},"message":')
        if not fields or not _HEAD_KEYS.isdisjoint(fields):  # as format spells it: one dict
            entry = {"time": self._time(created), "level": levelname.lower(), "logger": name, "message": message}
            return orjson.dumps(entry | fields, default=str).decode()
        # The same, without building the line's dict: the fields' object spliced after its head.
        return (f'{{"time":"{self._time(created)}",{head}{orjson.dumps(message).decode()},'
                f'{orjson.dumps(fields, default=str).decode()[1:]}')


class Verbatim:
    """The fields of a `Lines` never scrubbed (`names`), and which fields of a line are scanned:
    the others, worked out once for a line's keys and kept while the next lines have the same keys
    (an access line's are), which a set comparison in C tells."""

    __slots__ = ("names", "_scanned")

    def __init__(self, names: Collection[str] = ()) -> None:
        self.names = frozenset(names)
        self._scanned: tuple[frozenset[str], tuple[str, ...]] = (frozenset(), ())  # a line's keys, those scanned

    def scanned(self, fields: dict[str, Any]) -> tuple[str, ...]:
        """The keys of `fields` it does not name."""
        keys, scanned = self._scanned
        if fields.keys() != keys:
            scanned = tuple([key for key in fields if key not in self.names])
            self._scanned = (frozenset(fields), scanned)  # one assignment: a thread reads both or neither
        return scanned


NO_VERBATIM = Verbatim()


# Strings a redactor left as they were, remembered so that the next line holding them (the same
# account, vendor, model, message) need not scan them again; bounded: emptied when full, and only
# short strings are kept.
CLEAN_STRINGS = 4096
CLEAN_CHARS = 256


def _scrubbed_line(message: str, fields: dict[str, Any], verbatim: Verbatim, redact: Redactor,
                   clean: set[str]) -> tuple[str, dict[str, Any]]:
    """`message` and the strings of `fields` scrubbed, but for the `verbatim` fields' and the strings
    in `clean` (scrubbing left them as they are before; `clean` learns those it scanned): one scan
    of the rest when nothing is secret (see the module's docstring), else each string alone."""
    unknown = None if message in clean else [message]
    for key in verbatim.scanned(fields):
        value = fields[key]
        if value.__class__ is str:
            if value in clean:
                continue
        elif not isinstance(value, str):  # a number, None; or a subclass of str, never remembered
            continue
        if unknown is None:
            unknown = [value]
        else:
            unknown.append(value)
    if unknown is None:
        return message, fields
    joined = "\n".join(unknown)
    if redact(joined) == joined:
        if len(clean) + len(unknown) > CLEAN_STRINGS:
            clean.clear()
        clean.update([text for text in unknown if len(text) <= CLEAN_CHARS and text.__class__ is str])
        return message, fields
    return redact(message), {key: redact(value) if isinstance(value, str) and key not in verbatim.names else value
                             for key, value in fields.items()}


class _Direct:
    """The log as `configure` set it up: the root logger's one handler, its formatter and stream."""

    __slots__ = ("handlers", "handler", "formatter", "stream")

    def __init__(self, handler: logging.StreamHandler[Any], formatter: TextFormatter | JsonFormatter,
                 stream: CoalescedStream) -> None:
        self.handlers = [handler]  # what the root logger's handlers must still be
        self.handler = handler
        self.formatter = formatter
        self.stream = stream  # what the handler's stream must still be


_direct: _Direct | None = None


class Lines:
    """Structured lines of one logger (the access log's), each a message and its fields, written as
    logging would write them (see the module's docstring). The logger's level decides, as for any
    line; a log set up otherwise (other handlers, as tests capturing records add) gets a record.
    The `verbatim` fields hold the writer's own values (ids it made, numbers, fixed words): they
    are never scrubbed; every other field's string is."""

    def __init__(self, name: str, clock: Callable[[], float] = time.time, verbatim: Collection[str] = ()) -> None:
        self.logger = logging.getLogger(name)
        self._clock = clock
        self._verbatim = Verbatim(verbatim)

    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)

    def info(self, message: str, fields: dict[str, Any]) -> None:
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        direct = _direct
        if (direct is None or logging.root.handlers != direct.handlers or direct.handler.stream is not direct.stream
                or logger.handlers or logger.filters):
            logger.info("%s", message, extra={FIELDS: fields})
            return
        try:
            direct.stream.later(direct.formatter.line(self._clock(), "INFO", logger.name, message, fields,
                                                      self._verbatim) + direct.handler.terminator)
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
    _direct = None
    if plain:
        handler = root[0]
        stream = handler.stream
        if not isinstance(stream, CoalescedStream):
            stream = CoalescedStream(stream, handler)
            handler.setStream(stream)
        # uvicorn's handlers of the same stream write through it too, so that its lines and ours keep their order.
        for name in LOGGERS:
            for other in logging.getLogger(name).handlers:
                if isinstance(other, logging.StreamHandler) and other.stream is stream.stream:
                    other.setStream(stream)
        _direct = _Direct(handler, ours, stream)
