"""The access line written without logging's records (http/observe/logs.py `Lines`): the very line logging
would write, in text and in JSON, scrubbed of secrets, only at the level that shows it, and through
logging whenever the log is set up otherwise (a test capturing records, say). How the lines are
written together: tests/unit/test_log_stream.py."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import time

import pytest

from gateway.core.redaction import REDACTED, Redactor
from gateway.http.observe import logs
from tests.support.logs import served_log

NAME = "test.access"  # a logger of its own: the gateway's is left as other tests found it
CLOCK = 1764600000.0421  # a fixed time of the line, so that both ways of writing it can be compared
VENDOR_KEY = "vendor-key-0123456789"
QUOTED_KEY = 'vendor"key\\0123456789'  # a vendor key that JSON escapes
KEY_SHAPED = "sk-proj-" + "Q" * 24
FIELDS = {"request_id": "cmpl-1", "account": "acct-a", "key_id": None, "vendor": "fake", "model": "fake/logged",
          "status": 200, "stream": False, "latency_ms": 1.25, "ttft_ms": None}


def plain_log(level: str, fmt: str) -> contextlib.AbstractContextManager[io.StringIO]:
    """The log as `gateway serve` has it, scrubbing the vendor keys of these tests."""
    return served_log(level, fmt, Redactor([VENDOR_KEY, QUOTED_KEY]))


def through_logging(message: str, fields: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The line as a LogRecord made at CLOCK, through the root's handler (filter, formatter)."""
    with monkeypatch.context() as patched:
        patched.setattr(time, "time", lambda: CLOCK)
        record = logging.getLogger(NAME).makeRecord(NAME, logging.INFO, "", 0, "%s", (message,), None,
                                                    extra={logs.FIELDS: fields})
    logging.getLogger().handlers[0].handle(record)


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("message, fields", [
    ("POST /v5/completions 200", FIELDS),
    ("POST /v5/completions 502", FIELDS | {"model": f"fake/{KEY_SHAPED}", "outcome": f"quoted {VENDOR_KEY}"}),
    (f"Authorization: Bearer {KEY_SHAPED}", {}),
    # what JSON escapes around a secret, and a secret JSON escapes
    ("POST /v5/completions 200", FIELDS | {"model": f'fake/"{KEY_SHAPED}"'}),
    ("POST /v5/completions 200", FIELDS | {"outcome": f"quoted {QUOTED_KEY}"}),
    ("POST /v5/completions 200", FIELDS | {"outcome": "Authorization:\tBearer abcdefghijklmnop\n"}),
    ("POST /v5/completions 200", FIELDS | {"outcome": "x-api-key: [redacted]"}),  # scrubbing changes nothing
    # fields named as a line's own keys: the line's dict, not the fields spliced after its head
    ("POST /v5/completions 200", FIELDS | {"message": "inner", "time": 1}),
    ("POST /v5/completions 200", {"level": "x"}),
])
def test_a_line_written_directly_is_the_line_logging_writes(fmt, message, fields, monkeypatch):
    with plain_log("info", fmt) as out:
        logs.Lines(NAME, clock=lambda: CLOCK).info(message, dict(fields))
        direct = out.getvalue()
        through_logging(message, dict(fields), monkeypatch)
    assert direct.endswith("\n") and out.getvalue() == direct * 2  # logging wrote the same after it
    assert not any(secret in direct for secret in (KEY_SHAPED, VENDOR_KEY, QUOTED_KEY, 'key\\\\0123456789'))


def test_the_json_line_carries_its_fields_in_order_and_scrubbed():
    with plain_log("info", "json") as out:
        logs.Lines(NAME, clock=lambda: CLOCK).info("POST /v5/completions 200", FIELDS | {"model": f"fake/{KEY_SHAPED}"})
    [line] = out.getvalue().splitlines()
    entry = json.loads(line)
    assert list(entry) == ["time", "level", "logger", "message", *FIELDS]
    assert entry["time"] == "2025-12-01T14:40:00.042Z" and entry["level"] == "info" and entry["logger"] == NAME
    assert entry["message"] == "POST /v5/completions 200"
    assert entry["model"] == f"fake/{REDACTED}" and entry["key_id"] is None and entry["stream"] is False
    assert KEY_SHAPED not in line


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_below_its_level_no_line_is_written(fmt):
    with plain_log("warning", fmt) as out:
        lines = logs.Lines(NAME)
        assert not lines.enabled()
        lines.info("POST /v5/completions 200", FIELDS)
    assert out.getvalue() == ""


def test_with_other_handlers_the_line_is_a_record_as_before(caplog):
    with plain_log("info", "json"), caplog.at_level(logging.INFO, logger=NAME):
        logging.getLogger().addHandler(caplog.handler)  # as caplog's own is on the root logger
        logs.Lines(NAME).info("POST /v5/completions 200", FIELDS)
    [record] = [r for r in caplog.records if r.name == NAME]
    assert record.getMessage() == "POST /v5/completions 200" and getattr(record, logs.FIELDS) == FIELDS


class Broken(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError("the log's disk is full")


def test_a_failing_stream_is_the_handlers_to_report_not_the_callers(monkeypatch, capsys):
    with plain_log("info", "json"):
        logging.getLogger().handlers[0].setStream(Broken())
        logs.Lines(NAME).info("POST /v5/completions 200", FIELDS)  # does not raise
    assert "Logging error" in capsys.readouterr().err


def test_a_string_found_clean_once_is_still_scrubbed_where_a_secret_comes_with_it():
    with plain_log("info", "json") as out:
        lines = logs.Lines(NAME, clock=lambda: CLOCK)
        lines.info("POST /v5/completions 200", dict(FIELDS))  # its strings are now known to be clean
        lines.info("POST /v5/completions 200", FIELDS | {"model": f"fake/{KEY_SHAPED}"})
        lines.info("POST /v5/completions 200", dict(FIELDS))
    first, secret, again = map(json.loads, out.getvalue().splitlines())
    assert first == again and first["model"] == "fake/logged"
    assert secret["model"] == f"fake/{REDACTED}" and secret["account"] == "acct-a" and KEY_SHAPED not in out.getvalue()


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_only_the_fields_named_verbatim_are_left_unscrubbed(fmt):
    with plain_log("info", fmt) as out:
        logs.Lines(NAME, clock=lambda: CLOCK, verbatim=("request_id",)).info(
            "POST /v5/completions 200", FIELDS | {"request_id": "cmpl-sk-notakey00", "account": KEY_SHAPED})
    line = out.getvalue()
    assert "cmpl-sk-notakey00" in line and KEY_SHAPED not in line and REDACTED in line


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_field_the_lines_before_lacked_is_scrubbed(fmt):
    with plain_log("info", fmt) as out:
        lines = logs.Lines(NAME, clock=lambda: CLOCK, verbatim=("request_id",))
        lines.info("POST /v5/completions 200", dict(FIELDS))
        lines.info("POST /v5/completions 200", FIELDS | {"fallback_from": f"fake/{KEY_SHAPED}"})
        lines.info("POST /v5/completions 200", {"account": KEY_SHAPED})
        lines.info("POST /v5/completions 200", FIELDS | {"request_id": "cmpl-sk-notakey00"})  # verbatim still
    text = out.getvalue()
    assert len(text.splitlines()) == 4 and text.count(REDACTED) == 2 and KEY_SHAPED not in text
    assert "cmpl-sk-notakey00" in text


def test_the_strings_remembered_clean_are_bounded(monkeypatch):
    monkeypatch.setattr(logs, "CLEAN_STRINGS", 8)
    with plain_log("info", "json") as out:
        lines = logs.Lines(NAME, clock=lambda: CLOCK)
        for n in range(50):
            lines.info("POST /v5/completions 200", FIELDS | {"model": f"fake/m{n}"})
        formatter = logs._direct.formatter
        assert 0 < len(formatter._clean) <= 8
        long = "fake/" + "x" * logs.CLEAN_CHARS
        lines.info("POST /v5/completions 200", FIELDS | {"model": long})
        assert long not in formatter._clean  # long texts are scanned every time, never kept
    assert len(out.getvalue().splitlines()) == 51


@pytest.mark.parametrize("created", [CLOCK, 1764600000.0, 1764600000.9999999, 1764600000.5005, 1764600000 + 0.001])
def test_a_lines_milliseconds_are_what_logging_spells(created):
    record = logging.makeLogRecord({"created": created, "msecs": int((created - int(created)) * 1000) + 0.0})
    spelled = logging.Formatter().formatTime(record)  # "%s,%03d" of the record's msecs
    assert logs.TextFormatter(Redactor())._stamps(created) == spelled
