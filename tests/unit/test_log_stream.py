"""Access lines written together (http/observe/log_stream.py): lines given in one turn of the loop
are one write once the first has waited its time, at once when they reach the size limit, before
any record logged after them, and written when the process exits; a stream that fails is reported,
never raised to the request."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys
from pathlib import Path

from gateway.http.observe import log_stream, logs
from tests.support.logs import served_log

ROOT = Path(__file__).resolve().parents[2]
NAME = "test.access"  # a logger of its own: the gateway's is left as other tests found it
CLOCK = 1764600000.0421
FIELDS = {"request_id": "cmpl-1", "account": "acct-a", "status": 200}


class Recording(io.StringIO):
    """A stream that keeps each write it was given; `written` is set by the first."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []
        self.written = asyncio.Event()

    def write(self, text: str) -> int:
        self.writes.append(text)
        self.written.set()
        return super().write(text)


def test_lines_given_together_are_one_write_in_their_order_once_the_first_has_waited_its_time():
    recording = Recording()

    async def serve() -> list[str]:
        lines = logs.Lines(NAME, clock=lambda: CLOCK)
        for n in range(3):
            lines.info(f"POST /v5/completions {n}", {})
        await asyncio.sleep(0)
        waiting = list(recording.writes)  # nothing yet: an iteration of the loop has ended, the delay has not
        await asyncio.wait_for(recording.written.wait(), 30)  # the loop's timer writes them
        return waiting

    with served_log("info", "text"):
        logging.getLogger().handlers[0].stream.stream = recording
        assert asyncio.run(serve()) == []
    [written] = recording.writes
    assert [line.rpartition(": ")[2] for line in written.splitlines()] == [f"POST /v5/completions {n}" for n in range(3)]


def test_lines_that_reach_the_size_limit_are_written_at_once(monkeypatch):
    monkeypatch.setattr(log_stream, "COALESCE_BYTES", 200)
    recording = Recording()

    async def serve() -> list[str]:
        lines = logs.Lines(NAME, clock=lambda: CLOCK)
        for n in range(6):  # each line is about 60 characters: the fourth reaches 200
            lines.info(f"POST /v5/completions {n}", {})
        return list(recording.writes)

    with served_log("info", "text"):
        logging.getLogger().handlers[0].stream.stream = recording
        written_at_once = asyncio.run(serve())
    [first] = written_at_once
    assert 200 <= len(first) and first.count("\n") < 6  # the lines so far, without waiting for the timer


def test_a_record_logged_while_lines_wait_comes_after_them():
    async def serve() -> None:
        lines = logs.Lines(NAME, clock=lambda: CLOCK)
        lines.info("POST /v5/completions 200", {})
        logging.getLogger(NAME).warning("after the line")  # through logging's handler, at once

    with served_log("info", "text") as out:
        asyncio.run(serve())
    first, second = out.getvalue().splitlines()
    assert first.endswith("POST /v5/completions 200") and second.endswith("after the line")


class BrokenLater(io.StringIO):
    """A stream that fails each write, and says when the first was tried."""

    def __init__(self) -> None:
        super().__init__()
        self.tried = asyncio.Event()

    def write(self, text: str) -> int:
        self.tried.set()
        raise OSError("the log's disk is full")


def test_a_stream_failing_when_the_waiting_lines_are_written_is_reported_not_raised(capsys):
    broken = BrokenLater()

    async def serve() -> None:
        logs.Lines(NAME).info("POST /v5/completions 200", FIELDS)
        await asyncio.wait_for(broken.tried.wait(), 30)  # resumed after the callback that tried it returned

    with served_log("info", "json"):
        logging.getLogger().handlers[0].stream.stream = broken
        asyncio.run(serve())  # does not raise
    assert "Logging error" in capsys.readouterr().err


EXITING = """
import asyncio, logging, sys
from gateway.core.redaction import Redactor
from gateway.http.observe import logs

logging.basicConfig(stream=sys.stdout, level=logging.INFO)
logs.configure("info", "json", Redactor())

async def serve():
    logs.Lines("gateway.access").info("POST /v5/completions 200", {"request_id": "cmpl-last"})
    raise SystemExit(3)  # leaves the loop at once: the line waits for an iteration that never comes

asyncio.new_event_loop().run_until_complete(serve())
"""


def test_a_line_waiting_when_the_process_exits_is_written():
    done = subprocess.run([sys.executable, "-c", EXITING], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    [line] = done.stdout.splitlines()
    assert json.loads(line)["request_id"] == "cmpl-last"
