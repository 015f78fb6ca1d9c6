"""Per-process limits that keep one gateway process healthy under load.

- Admission: at most `max_concurrent` completions in flight (streams count until they end);
  beyond that an immediate 503 with Retry-After, never an unbounded queue.
- Fan-out: at most `max_choices` choices generated for one request (prompts x max(n, best_of)).
"""

from __future__ import annotations

from gateway.errors import InvalidRequest, VendorUnavailable


class Admission:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0

    def enter(self) -> None:
        if self.in_flight >= self.limit:
            raise VendorUnavailable(
                f"the gateway is at its limit of {self.limit} requests in flight; retry shortly",
                code="gateway_overloaded",
                retry_after=1,
            )
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight -= 1


def check_fanout(prompts: int, n: int, best_of: int | None, limit: int) -> None:
    choices = prompts * max(n, best_of or 1)
    if choices > limit:
        raise InvalidRequest(
            f"this request asks for {choices} generations (prompts x max(n, best_of)); the limit is {limit}",
            code="fanout_too_large",
            param="n",
        )
