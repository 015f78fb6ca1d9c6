"""What the `gateway` command prints (tables, CSV, JSON), and the one place it is made safe for a
terminal.

What it prints holds text others wrote: account and key names, the audit trail's actors (a key's
name) and addresses, the `user` a client sent with a request, error messages naming them. A control
character among them would be obeyed by the operator's terminal, not shown: ESC starting a CSI or
OSC sequence (retitle the window, clear the screen, move the cursor over a line of the audit), BEL,
CR and backspace (overwrite what came before), the C1 controls U+0080–U+009F (which some terminals
take as ESC sequences), and the bidirectional overrides (which reorder what is shown).

So for the command's whole run, argparse's messages and every error included, standard output and
error are replaced by writers that spell each such character as Python does in a string (`\\x1b`,
`\\r`, `\\u202e`), newlines apart (`escaping_output`). A table's or CSV's cell escapes newlines
too, so that a row stays a line. JSON needs nothing more: json.dumps (ensure_ascii) writes every
character outside printable ASCII, DEL included, as `\\uXXXX`, so the writers leave it alone and it
stays the exact value. A table is for reading: a name holding a backslash reads the same as one
holding what it escapes.
"""

from __future__ import annotations

import contextlib
import csv
import json
import re
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, TextIO

# Besides the C0 controls: DEL and the C1 controls, the line and paragraph separators, and the
# bidirectional marks, embeddings, overrides and isolates (Unicode's Bidi_Control characters).
_UNSAFE = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_IN_CELL = re.compile(f"[\x00-\x1f{_UNSAFE}]")
_IN_LINES = re.compile(f"[\x00-\x09\x0b-\x1f{_UNSAFE}]")  # a newline ends a line, as written


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _spelled(match: re.Match[str]) -> str:
    """A character as Python spells it in a string."""
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def escaped(text: str) -> str:
    """`text` with every control character spelled as an escape, newlines included: one line."""
    return _IN_CELL.sub(_spelled, text)


class EscapingWriter:
    """A text stream that writes what it is given with every control character but the newline
    spelled as an escape; the rest of the stream (flush, fileno, encoding...) is the one it wraps."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(_IN_LINES.sub(_spelled, text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def escaping_output() -> Iterator[None]:
    """Standard output and error escaped (EscapingWriter) until the block ends."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapingWriter(out), EscapingWriter(err)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def emit(rows: list[dict[str, Any]], columns: Sequence[str], fmt: str) -> None:
    """`rows` as a table (numbers aligned right), CSV or JSON, on standard output."""
    if fmt == "json":
        print(json.dumps([{c: as_json(row[c]) for c in columns} for row in rows], indent=2))
        return
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[escaped(as_text(row[c])) for c in columns] for row in rows])
        return
    cells = [list(columns)] + [[escaped(as_text(row[c])) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    numeric = [bool(rows) and all(_is_number(row[c]) or row[c] is None for row in rows)
               and any(_is_number(row[c]) for row in rows) for c in columns]
    for line in cells:
        print("  ".join(cell.rjust(w) if num else cell.ljust(w) for cell, w, num in zip(line, widths, numeric))
              .rstrip())


def as_json(value: Any) -> Any:
    return value.isoformat().replace("+00:00", "Z") if isinstance(value, datetime) else value


def as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):  # dollars, to the nano-dollar, without an exponent
        return f"{value:.9f}".rstrip("0").rstrip(".")
    return str(as_json(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
