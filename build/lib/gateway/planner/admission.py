"""Admission: at most `max_concurrent` completions in flight per process (streams count until
they end); beyond that an immediate 503 with Retry-After, never an unbounded queue. (The other
per-request bound, vendor calls of one fan-out, is in planner/plan.py.)"""

from __future__ import annotations

from gateway.core.errors import GatewayOverloaded


class Admission:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0

    def enter(self) -> None:
        if self.in_flight >= self.limit:
            raise GatewayOverloaded(
                f"the gateway is at its limit of {self.limit} requests in flight; retry shortly",
                code="gateway_overloaded",
                retry_after=1,
            )
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight -= 1

