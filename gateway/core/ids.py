"""Identifiers of 128 random bits, drawn from the operating system's randomness in blocks.

A completion's id is made for every request. `os.urandom(16)` per id is a system call per
request, and on these virtual machines a system call is where the event loop's thread lets the
ledger's thread take the interpreter, which a profile showed (docs/performance.md). Drawing 4 KiB
at a time gives the same bits, one call per 256 ids. A
forked child starts with an empty block, so no two processes hand out the same ids.
"""

from __future__ import annotations

import os

BLOCK_BYTES = 4096
_HEX = 32  # hex digits of 128 bits


class RandomIds:
    """`next()`: 32 hex digits (128 bits) of the OS's randomness, never the same bits twice."""

    __slots__ = ("_block", "_at")

    def __init__(self) -> None:
        self._block = ""
        self._at = 0

    def next(self) -> str:
        at = self._at
        if at + _HEX > len(self._block):
            self._block, at = os.urandom(BLOCK_BYTES).hex(), 0
        self._at = at + _HEX
        return self._block[at:at + _HEX]

    def forget(self) -> None:
        """Drop what is left of the block (a forked child must not repeat its parent's ids)."""
        self._block, self._at = "", 0


ids = RandomIds()
os.register_at_fork(after_in_child=ids.forget)
