"""`python -m tests.support.clocked_gateway serve ...`: the real `gateway` command, with the limits' clock
and the keys' (store/key_cache.py) read from the file GATEWAY_TEST_CLOCK_FILE names (seconds since
the epoch), so that a test moves the time of per-minute limits, budget periods, expiries and a
rotation's grace by writing it (tests/support/ `FileClock`).

The clock is set when this module is imported, and multiprocessing imports it again in each
worker it spawns (as `__mp_main__`), so `--workers N` gateways read it too.
"""

from __future__ import annotations

import os
import sys

from gateway.limits import limiter
from gateway.store import key_cache


def _clock() -> float:
    with open(os.environ["GATEWAY_TEST_CLOCK_FILE"]) as file:
        return float(file.read())


limiter.wall_clock = _clock
key_cache.wall_clock = _clock

if __name__ == "__main__":
    from gateway.cli import main

    sys.exit(main())
