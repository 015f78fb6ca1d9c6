"""The usage ledger: one row per completion request that reached a vendor, written off the
request's path by one background writer per process.

A handler opens a `Meter` per request, names the vendor call it makes, tells it what text went to
the client, and closes it with the vendor's usage (`finish`), with what went wrong (`fail`) or
because the client left (`left`). Without usage from the vendor the meter estimates it: every
prompt sent plus the text delivered so far, counted with a tokenizer (store/tokens.py) in a
worker thread, and the row says `estimated`.

Durability, in the order things can go wrong:
- Rows wait in memory until the writer commits them. The writer commits everything pending in
  one statement (group commit), at most every COMMIT_INTERVAL, so a hard kill (SIGKILL,
  OOM) loses only the rows answered since the last commit began (README, "Storage", says how
  much; tests/test_ledger_durability.py measures it).
- A failing database does not fail requests: rows stay in memory and the writer retries with
  backoff, /readyz reports `degraded`, and the log says why. Past `ledger_buffer_rows` waiting
  rows, each further row is logged at ERROR in full (JSON; no key, only the key's id) and dropped.
- A row the database refuses outright (not an outage) is logged in full and dropped, so that it
  cannot block the rows behind it.
- Graceful shutdown (SIGTERM): once the server has finished its requests, `close()` writes every
  pending row, retrying for up to CLOSE_TIMEOUT seconds; a row still unwritten is logged in full.
Rows are keyed by request id and inserted with ON CONFLICT DO NOTHING, so a batch retried after an
uncertain commit is never counted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, StatementError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.core.completion import Attempt, Choice, Usage
from gateway.core.errors import GatewayError, VendorTimeout
from gateway.store import database, tokens
from gateway.store.tables import ledger

log = logging.getLogger("gateway.ledger")

# What became of a request.
COMPLETED = "completed"  # the vendor finished its answer
CLIENT_DISCONNECTED = "client_disconnected"  # the client left mid-stream
VENDOR_ERROR = "vendor_error"  # the vendor refused, failed or broke off
TIMEOUT = "timeout"  # the vendor did not answer in time
GATEWAY_ERROR = "gateway_error"  # a fault of the gateway itself


def outcome_of(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return CLIENT_DISCONNECTED
    if isinstance(exc, VendorTimeout):
        return TIMEOUT
    if isinstance(exc, GatewayError) and exc.vendor:
        return VENDOR_ERROR
    return GATEWAY_ERROR


@dataclass(slots=True)
class _Estimate:
    count: Callable[[str], int]
    prompts: list[str]  # each prompt as often as it was sent to the vendor
    sent: list[str]  # the text delivered per choice

    def tokens(self) -> tuple[int, int]:
        return sum(map(self.count, self.prompts)), sum(map(self.count, self.sent))


class Meter:
    """One request's way into the ledger, opened as the request starts. The handler names each
    vendor call it makes (`trying`), reports the text sent, and closes the meter exactly once:
    `finish` with the vendor's usage, `fail` with what went wrong, or `left` when the client went
    away. A request that never reached a vendor (refused by the gateway) records nothing."""

    __slots__ = ("_ledger", "_attempt", "_requested", "_row", "_clock", "_first_text", "_sent", "_closed")

    def __init__(self, ledger_: Ledger, request_id: str, account_id: str, key_id: str) -> None:
        self._ledger = ledger_
        self._attempt: Attempt | None = None
        self._requested: str | None = None  # the first model tried is the one the client asked for
        self._clock = time.monotonic()
        self._first_text: float | None = None
        self._sent: dict[int, list[str]] = {}
        self._closed = False
        self._row: dict[str, Any] = {
            "request_id": request_id,
            "account_id": account_id,
            "key_id": key_id,
            "started_at": datetime.now(UTC),
        }

    def trying(self, attempt: Attempt) -> None:
        """Vendor calls are made for `attempt` (a fallback replaces the model tried before it)."""
        self._attempt = attempt
        if self._requested is None:
            self._requested = attempt.model

    def sent(self, choices: Iterable[Choice]) -> None:
        """Text went to the client: the first time is the time to first token, and all of it is
        what an estimate counts if the vendor's usage never comes."""
        for choice in choices:
            if choice.text:
                if self._first_text is None:
                    self._first_text = time.monotonic()
                self._sent.setdefault(choice.index, []).append(choice.text)

    def finish(self, usage: Usage | None, choices: Iterable[Choice] = ()) -> None:
        """The request completed; `choices` is a plain (non-stream) answer's text."""
        self.sent(choices)
        self._close(COMPLETED, usage)

    def fail(self, exc: BaseException) -> None:
        self._close(outcome_of(exc), None)

    def left(self) -> None:
        """The client went away (or the response ended before the stream did)."""
        self._close(CLIENT_DISCONNECTED, None)

    def _close(self, outcome: str, usage: Usage | None) -> None:
        if self._closed:
            return
        self._closed = True
        attempt = self._attempt
        if attempt is None:
            return
        row = self._row
        row |= {
            "vendor": attempt.vendor,
            "model": attempt.model,
            "fallback_from": self._requested if self._requested != attempt.model else None,
            "streamed": attempt.streamed,
            "end_user": attempt.end_user,
            "outcome": outcome,
            "ended_at": datetime.now(UTC),
            "ttft_ms": None if self._first_text is None else round((self._first_text - self._clock) * 1000, 3),
        }
        if usage is not None:
            row |= {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
                "cached_tokens": _detail(usage.prompt_tokens_details, "cached_tokens"),
                "reasoning_tokens": _detail(usage.completion_tokens_details, "reasoning_tokens"),
                "estimated": usage.estimated,
            }
            self._ledger.add(row)
            return
        estimate = _Estimate(
            count=tokens.counter(attempt.model, attempt.count_tokens),
            prompts=list(attempt.prompts_sent),
            sent=["".join(pieces) for pieces in self._sent.values()],
        )
        row |= {"cached_tokens": None, "reasoning_tokens": None, "estimated": True}
        self._ledger.estimate(row, estimate)


def _detail(details: dict[str, Any] | None, name: str) -> int | None:
    value = (details or {}).get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Ledger:
    BATCH_ROWS = 500  # rows per INSERT statement; a commit takes everything pending
    RETRY_FIRST, RETRY_MAX = 0.1, 5.0  # seconds between attempts while the database fails
    CLOSE_TIMEOUT = 10.0  # seconds shutdown keeps retrying before it logs what is left
    # A commit that hangs (a database that stopped answering) counts as failed after this long:
    # retried like any failure, and visible in readiness. Retrying is safe (ON CONFLICT DO NOTHING).
    WRITE_TIMEOUT = 15.0
    # At most one commit per this many seconds. A commit costs the event loop noticeable CPU
    # (SQLAlchemy's async path), so committing each row as it comes taxed every request at
    # low concurrency; rows that arrive meanwhile join the next batch. It adds at most this much
    # to the loss window of a hard kill (SIGTERM loses nothing).
    COMMIT_INTERVAL = 0.05

    def __init__(self, engine: AsyncEngine, max_pending: int) -> None:
        self._engine = engine
        self._max_pending = max_pending
        self._pending: deque[dict[str, Any]] = deque()
        self._wake = asyncio.Event()
        self._counting: set[asyncio.Task[None]] = set()
        self._writer: asyncio.Task[None] | None = None
        self._connection: AsyncConnection | None = None  # the writer's own
        self._closing = False
        self._close_deadline = 0.0  # set by close()
        self._closed = False
        self._failing_since: float | None = None
        self._failure = ""
        dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
        self._insert = dialect.insert(ledger).on_conflict_do_nothing(index_elements=["request_id"])

    def meter(self, *, request_id: str, account_id: str, key_id: str) -> Meter:
        return Meter(self, request_id, account_id, key_id)

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write_forever(), name="ledger-writer")

    def not_ready(self) -> str | None:
        """None while rows are being written, else what is wrong (shown by /readyz)."""
        if self._writer is not None and self._writer.done() and not self._closing:
            return "the ledger writer stopped; see the log"
        if self._failing_since is None:
            return None
        seconds = time.monotonic() - self._failing_since
        return f"database unavailable for {seconds:.0f}s ({self._failure}); {len(self._pending)} ledger rows waiting"

    def add(self, row: dict[str, Any]) -> None:
        if self._closed:
            _lost("the ledger is closed", row)
        elif len(self._pending) >= self._max_pending:
            _lost(f"{len(self._pending)} rows already wait for the database (ledger_buffer_rows)", row)
        else:
            self._pending.append(_clean(row))
            self._wake.set()

    def estimate(self, row: dict[str, Any], estimate: _Estimate) -> None:
        """Count the tokens in a worker thread (a long prompt takes a pure-Python tokenizer a
        while), then add the row."""
        task = asyncio.get_running_loop().create_task(self._count(row, estimate))
        self._counting.add(task)
        task.add_done_callback(self._counting.discard)

    async def _count(self, row: dict[str, Any], estimate: _Estimate) -> None:
        try:
            prompt, completion = await asyncio.to_thread(estimate.tokens)
        except Exception:
            log.exception("counting tokens for %s failed; its row records 0 tokens", row["request_id"])
            prompt = completion = 0
        self.add(row | {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})

    async def close(self) -> None:
        """Write every pending row (graceful shutdown), then stop."""
        if self._counting:
            await asyncio.gather(*self._counting, return_exceptions=True)
        self._closing = True
        self._close_deadline = time.monotonic() + self.CLOSE_TIMEOUT
        self._wake.set()
        if self._writer is not None:
            await self._writer
        await self._drop_connection()
        self._closed = True
        while self._pending:
            _lost(f"shutdown: the database did not take it within {self.CLOSE_TIMEOUT:.0f}s", self._pending.popleft())

    async def _write_forever(self) -> None:
        delay = self.RETRY_FIRST
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = list(itertools.islice(self._pending, self.BATCH_ROWS))
            started = time.monotonic()
            try:
                await self._write(batch)
            except Exception as exc:
                self._failed(exc)
                if self._closing and time.monotonic() + delay > self._close_deadline:
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.RETRY_MAX)
                continue
            for _ in batch:
                self._pending.popleft()
            delay = self.RETRY_FIRST
            if self._failing_since is not None:
                log.warning("ledger: database is back after %.1fs; %d rows still waiting",
                            time.monotonic() - self._failing_since, len(self._pending))
                self._failing_since = None
            if not self._closing:
                await asyncio.sleep(self.COMMIT_INTERVAL - (time.monotonic() - started))

    async def _write(self, rows: list[dict[str, Any]]) -> None:
        try:
            await self._insert_rows(rows)
            return
        except Exception as exc:
            if not _refused(exc):
                raise  # the database is away: the writer retries the batch
            refused = exc
        if len(rows) == 1:
            _lost(f"the database refused it ({_reason(refused)})", rows[0])
            return
        # Some row is refused for what it is: write them one by one so that only that row is set
        # aside (an outage meanwhile raises, and the whole batch is retried).
        for row in rows:
            try:
                await self._insert_rows([row])
            except Exception as exc:
                if not _refused(exc):
                    raise
                _lost(f"the database refused it ({_reason(exc)})", row)

    async def _insert_rows(self, rows: list[dict[str, Any]]) -> None:
        # The writer keeps its own connection between commits: a pool checkout (with its ping)
        # and return (with its rollback) around each batch would double a commit's round trips,
        # and the loss window on a hard kill is a commit long.
        if self._connection is None:
            self._connection = await database.write_connection(self._engine)
        try:
            async with asyncio.timeout(self.WRITE_TIMEOUT), self._connection.begin():
                await self._connection.execute(self._insert, rows)
        except Exception as exc:
            if not _refused(exc):  # the connection may be broken: the next attempt opens a new one
                await self._drop_connection()
            raise

    async def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()

    def _failed(self, exc: Exception) -> None:
        reason = _reason(exc)
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.error("ledger: cannot write to the database (%s); %d rows wait in memory, retrying",
                      reason, len(self._pending))
        elif reason != self._failure:
            log.error("ledger: database still failing (%s); %d rows waiting", reason, len(self._pending))
        self._failure = reason


def _refused(exc: Exception) -> bool:
    """A row's own fault (bad data, broken constraint), as opposed to a database that is away."""
    if isinstance(exc, DataError | IntegrityError):
        return True
    return isinstance(exc, StatementError) and not isinstance(exc, DBAPIError)  # failed binding a value


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    # PostgreSQL text cannot hold NUL, and the model name and `user` come from the client: one
    # such row would otherwise be refused. Replaced on both databases, so both keep the same text.
    for name in ("vendor", "model", "end_user"):
        value = row.get(name)
        if isinstance(value, str) and "\x00" in value:
            row[name] = value.replace("\x00", "\ufffd")
    return row


def _lost(why: str, row: dict[str, Any]) -> None:
    log.error("ledger row NOT written (%s): %s", why, json.dumps(row, default=str, sort_keys=True))


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
