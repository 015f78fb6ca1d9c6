"""The gateway's log as `gateway serve` sets it up, written to a buffer a test reads."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator

from gateway.core.redaction import Redactor
from gateway.http.observe import logs


@contextlib.contextmanager
def served_log(level: str, fmt: str, redact: Redactor | None = None) -> Iterator[io.StringIO]:
    """The log as `gateway serve` has it (the root's one stream handler, set up by `configure`),
    written to the returned buffer; everything as it was afterwards."""
    root = logging.getLogger()
    handlers, old_level, direct = root.handlers, root.level, logs._direct
    out = io.StringIO()
    root.handlers = [logging.StreamHandler(out)]
    root.setLevel(level.upper())  # configure's basicConfig leaves a root with handlers as it is
    try:
        logs.configure(level, fmt, redact or Redactor())
        yield out
    finally:
        root.handlers = handlers
        root.setLevel(old_level)
        logs._direct = direct
