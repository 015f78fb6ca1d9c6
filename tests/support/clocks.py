"""Clocks a test moves: in this process (ManualClock), in a gateway process (FileClock), and
the fixed "now" of budgets kept in Redis."""

from __future__ import annotations

import os
import time


class ManualClock:
    """A monotonic clock (seconds) that moves only when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FileClock:
    """The limits' clock of gateways started with tests/support/clocked_gateway.py: a file holding seconds
    since the epoch, which `advance` moves (the gateway's environment names it)."""

    def __init__(self, path: str, now: float | None = None) -> None:
        self.path = path
        # From the real time: the ledger's rows, from which a budget starts, are stamped with it.
        self.set(time.time() if now is None else now)

    def set(self, now: float) -> None:
        self.now = now
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as file:
            file.write(repr(now))
        os.replace(tmp, self.path)  # a reader never sees half a number

    def advance(self, seconds: float) -> None:
        self.set(self.now + seconds)

    @property
    def env(self) -> dict[str, str]:
        return {"GATEWAY_TEST_CLOCK_FILE": self.path}


def start_of_today() -> float:
    """The start of the current UTC day, as a test's fixed "now" for budgets kept in Redis: their
    counters expire at their period's end (PEXPIREAT, limits/redis_counters.py), and Redis expires
    them by its own clock, so a "now" of a day gone by would see them vanish as they are written."""
    return float(int(time.time()) // 86_400 * 86_400)
