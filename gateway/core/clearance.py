"""A request's clearance: what each of its vendor calls waits on before a vendor is asked, and who
hears of text generated before any of it reaches the client.

The request's lifecycle (http/lifecycle.py) makes one per request and the planner puts it in every
vendor call it makes (`Call.clearance`), so the dependency is where the layer test sees it: an
argument, not a variable of the task's context.

- `wait()`: the limits' verdict comes from a shared store while the request is planned and its
  vendor request built; the vendor layer awaits it at the last moment before a vendor is asked (an
  HTTP request's first byte, the embedded model's first step). It returns when the request may go
  on and raises `Withheld` when it may not. Without a deferred verdict it returns at once.
- `generated(candidate, text)`: an adapter that generates a non-streamed answer piece by piece (the
  embedded model) reports each piece, so that a request whose client left mid-generation is billed
  for what was generated, not for nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable


class Clearance:
    __slots__ = ("_wait", "_heard")

    def __init__(self, heard: Callable[[int, str], None] | None = None) -> None:
        self._wait: Callable[[], Awaitable[None]] | None = None
        self._heard = heard

    def defer_to(self, wait: Callable[[], Awaitable[None]] | None) -> None:
        """From now on `wait()` awaits `wait` (None: nothing again). The lifecycle's, alone."""
        self._wait = wait

    async def wait(self) -> None:
        """Returns once the request may reach a vendor; raises Withheld when a limit refused it."""
        wait = self._wait
        if wait is not None:
            await wait()

    @property
    def hears(self) -> bool:
        """Whether anyone hears of generated text (an adapter may skip collecting it otherwise)."""
        return self._heard is not None

    def generated(self, candidate: int, text: str) -> None:
        """`text` was generated for `candidate` (not yet sent to the client)."""
        heard = self._heard
        if heard is not None:
            heard(candidate, text)


class Withheld(BaseException):
    """The clearance was refused (a limit): no vendor was asked. A BaseException, like a
    cancellation, so that no layer between the vendor and the handler takes it for a vendor's
    failure (a retry, a fallback, a 502); the lifecycle answers with `error`."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


# The clearance of a vendor call outside any request (tests, benchmarks): nothing to wait for, and
# nobody hears. Never deferred (only a lifecycle's own clearance is).
CLEAR = Clearance()
