"""The log's stream: access lines written together (`CoalescedStream`), not a system call each.
Why, and what may wait how long: http/observe/logs.py's docstring."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
import weakref
from typing import Any

# How long an access line may wait for others to be written with, and how much may wait.
COALESCE_SECONDS = 0.05
COALESCE_BYTES = 64 * 1024


class CoalescedStream:
    """A log stream that writes the lines given to `later` together: `COALESCE_SECONDS` after the
    first of them (one timer of the loop's), or at once when `COALESCE_BYTES` wait. `write` (what
    logging's handlers call) and `flush` first write what waits, so the stream's lines stay in the
    order they were given. Without a running loop (start-up, shut-down, a thread when nothing
    waits) `later` writes at once. What still waits when the process exits is written then
    (`flush_all`, at exit; logging's shutdown flushes its handlers too)."""

    def __init__(self, stream: Any, handler: logging.Handler) -> None:
        self.stream = stream
        self._handler = handler  # reports a failed write, as for a record
        self._waiting: list[str] = []
        self._size = 0  # characters waiting
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop that will write what waits
        self._lock = threading.Lock()  # handlers of several loggers, and threads, share the stream
        _streams.add(self)

    def later(self, line: str) -> None:
        with self._lock:
            loop = self._loop
            if loop is None or loop.is_closed():
                loop = asyncio._get_running_loop()
                if loop is None:
                    self._write_waiting()
                    self.stream.write(line)
                    self.stream.flush()
                    return
                loop.call_later(COALESCE_SECONDS, self._written)
                self._loop = loop
            self._waiting.append(line)
            self._size += len(line)
            if self._size >= COALESCE_BYTES:  # the timer still comes, and finds what follows
                self._write_waiting()

    def write(self, text: str) -> int:
        with self._lock:
            self._write_waiting()
            return self.stream.write(text)

    def flush(self) -> None:
        with self._lock:
            self._write_waiting()
            self.stream.flush()

    def _write_waiting(self) -> None:
        if self._waiting:
            lines, self._waiting, self._size = self._waiting, [], 0
            self.stream.write("".join(lines))

    def _written(self) -> None:
        self._loop = None
        try:
            self.flush()
        except Exception:  # as a handler reports a record it could not write, never the loop's to handle
            self._handler.handleError(logging.makeLogRecord({"msg": "access lines written after their wait"}))


_streams: weakref.WeakSet[CoalescedStream] = weakref.WeakSet()


@atexit.register
def flush_all() -> None:
    """Write what waits in every CoalescedStream (at exit: nothing written may be lost)."""
    for stream in list(_streams):
        with contextlib.suppress(Exception):  # a stream closed before exit has nothing left to take
            stream.flush()
