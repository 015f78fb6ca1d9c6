"""What the layers below http report as they work, for metrics and traces.

The planner, the vendor adapters and the ledger cannot import the HTTP layer, where Prometheus and
OpenTelemetry are wired (gateway/http/observe/observability.py); they call the process's `Observer`
instead, which `current()` returns. The default one hears nothing and costs a method call, so the
code below needs no "is observability on?" checks, and tests of a layer run without any of it.

Two kinds of report:
- counts: a vendor retry, a fallback, a ledger row (its tokens and cost), the ledger's backlog and losses,
  and, for the features that produce them, a rate-limited request, a deployment's health;
- spans: a vendor call (`vendor_call`, one per call the planner makes, covering its retries and,
  for a stream, its last chunk) and each HTTP request to the vendor within it (`vendor_request`).
  A `Span` is never left current across a `yield`: a generator may be closed from another task,
  where the context it attached is not the current one. `Span.current()` attaches it for one step.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from gateway.core.completion import Chunk, CompletionCall, Result


class Span:
    """A unit of work in a trace; this one records nothing."""

    __slots__ = ()

    def set(self, attributes: Mapping[str, Any]) -> None:
        """Attributes of the work (semantic-convention names), set as they become known."""

    def failed(self, error: BaseException) -> None:
        """The work ended with `error`."""

    def end(self) -> None:
        """The work is over; once."""

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """While inside, spans started in this task (and tasks it creates) are this one's children."""
        yield

    def result(self, result: Result) -> None:
        """A vendor call's whole answer (its usage, its finish reasons)."""

    def chunk(self, chunk: Chunk) -> None:
        """A piece of a vendor call's stream."""


NO_SPAN = Span()


class Observer:
    """Hears what the layers below http do. This one ignores it all; the HTTP layer installs one
    that counts (Prometheus) and traces (OpenTelemetry)."""

    # -- spans ------------------------------------------------------------------------------
    def vendor_call(self, vendor: str, call: CompletionCall) -> Span:
        """One call of a plan to `vendor`, started now; retries and a stream's reading included."""
        return NO_SPAN

    def vendor_request(self, vendor: str, method: str, url: Any, resend: int) -> Span:
        """One HTTP request to a vendor (`url` as its client has it, str() gives it): `resend` 0
        for the first try, k for the k-th retry."""
        return NO_SPAN

    # -- counts -----------------------------------------------------------------------------
    def vendor_retry(self, vendor: str, reason: str) -> None:
        """A vendor request is sent again (`reason`: the status it answered, or what failed)."""

    def fallback(self, model: str, to: str) -> None:
        """`model` failed on the vendor's side and the request goes on to `to`."""

    def ledger_row(self, row: Mapping[str, Any]) -> None:
        """A request's usage row is complete (written or not): its vendor, model, tokens and cost."""

    def ledger_pending(self, rows: int) -> None:
        """Rows now waiting for the ledger's writer in this process."""

    def ledger_dropped(self, rows: int) -> None:
        """Rows that will never be written (logged in full instead)."""

    def rate_limited(self, reason: str) -> None:
        """A request refused by one of the gateway's own limits (`reason`: which one, a fixed word)."""

    def deployment_health(self, vendor: str, deployment: str, healthy: bool) -> None:
        """A deployment of `vendor` is now taken (healthy) or left out (unhealthy) by this process."""


_observer = Observer()


def current() -> Observer:
    return _observer


def install(observer: Observer) -> None:
    """The process's observer from now on (the HTTP layer's, at start-up)."""
    global _observer
    _observer = observer


def observed_stream(span: Span, chunks: AsyncIterator[list[Chunk]]) -> AsyncIterator[list[Chunk]]:
    """`chunks` (a vendor stream's lists of chunks, one list per read), with `span` current while
    each list is awaited (so the vendor requests made for them are its children) and told of each
    chunk; ended when the stream ends, however it ends. Unwrapped when nothing records the span."""
    return chunks if span is NO_SPAN else _observed_stream(span, chunks)


async def _observed_stream(span: Span, chunks: AsyncIterator[list[Chunk]]) -> AsyncIterator[list[Chunk]]:
    try:
        while True:
            with span.current():
                batch = await anext(chunks, None)
            if batch is None:
                return
            for chunk in batch:
                span.chunk(chunk)
            yield batch
    except BaseException as exc:
        span.failed(exc)
        raise
    finally:
        span.end()
        await chunks.aclose()  # type: ignore[attr-defined]
