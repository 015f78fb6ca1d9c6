"""gateway/cli_output.py: every character a terminal obeys rather than shows is spelled out, in a
table's cell and in every line the command writes; nothing else changes."""

from __future__ import annotations

import io
import json

import pytest

from gateway.cli_output import EscapingWriter, emit, escaped

OBEYED = {
    "\x1b": r"\x1b", "\x07": r"\x07", "\x08": r"\x08", "\r": r"\r", "\t": r"\t", "\x00": r"\x00", "\x7f": r"\x7f",
    "\x9b": r"\x9b", "\x85": r"\x85", "\u202e": r"\u202e", "\u2066": r"\u2066", "\u200f": r"\u200f",
    "\u2028": r"\u2028",
}


@pytest.mark.parametrize(("char", "spelled"), OBEYED.items(), ids=[repr(c) for c in OBEYED])
def test_each_obeyed_character_is_spelled_out(char, spelled):
    assert escaped(f"a{char}b") == f"a{spelled}b"
    written = io.StringIO()
    assert EscapingWriter(written).write(f"a{char}b\n") == 4
    assert written.getvalue() == f"a{spelled}b\n"


def test_a_cell_is_one_line_and_what_is_shown_stays():
    assert escaped("two\nlines") == r"two\nlines"
    shown = "Acme, Inc. — équipe 東京 ✓ \\x1b"  # printable text, a backslash among it, is left as it is
    assert escaped(shown) == shown
    written = io.StringIO()
    EscapingWriter(written).write(shown + "\n")
    assert written.getvalue() == shown + "\n"


def test_json_is_exact_and_needs_no_escaping(capsys):
    name = "x\x1b]0;t\x07\x9b\u202e\x7f\ny"
    emit([{"name": name}], ("name",), "json")
    printed = capsys.readouterr().out
    assert json.loads(printed) == [{"name": name}]
    assert all(" " <= c <= "~" for c in printed.replace("\n", ""))  # printable ASCII only: nothing to escape
