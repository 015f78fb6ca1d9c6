"""Reading a deployment's 200 answer, and what in it is that deployment's failure.

A 200 is not yet an answer. A body that is not the vendor's format (not JSON, or JSON the adapter
cannot read), a stream that ends without a valid event or is cut before its end, a vendor that
never sends its answer: each is a failure of the deployment, as a 5xx is (vendors/transport/balancer.py
counts it), and, while nothing of the answer went to the client, it is tried again on another
deployment (vendors/transport/http.py). So a try is only over once its answer proved readable: a whole
answer once read, a stream once its first chunks came.

An adapter says how its answers are read: `read` turns a non-streamed answer's JSON into its
result, and a `StreamDecoder` (a new one per try) turns a stream's events into chunks; both raise
the GatewayError a malformed answer means (VendorFailed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import orjson

from gateway.core.config import VendorConfig
from gateway.core.errors import GatewayError, VendorFailed, VendorTimeout
from gateway.core.streams import Watch
from gateway.vendors import untrusted as read
from gateway.vendors.transport.sse_reader import Event, EventParser, MalformedStream
from gateway.vendors.transport.client import Answer, TooLarge, TransportError, read_body
from gateway.vendors.vendor_errors import redact, transport_error

T = TypeVar("T")
R = TypeVar("R")

# The largest non-streamed answer read from a vendor, in bytes. A completion, even with n choices
# and logprobs for thousands of tokens, is far smaller; a vendor sending more (or without end) is
# refused instead of filling the gateway's memory. (A stream is bounded per event: sse_reader.py.)
MAX_ANSWER_BYTES = 32 << 20
# Where a failed try may be retried: on any deployment, or only on another one (a deployment that
# refused the gateway's key: another deployment has another key; one that timed out or sent what
# is not an answer: asking it again would cost the same).
ANYWHERE, ELSEWHERE = "anywhere", "elsewhere"


@dataclass(frozen=True, slots=True)
class Failure:
    """How one try on one deployment failed: the error, whether and where it may be tried again
    (ANYWHERE, ELSEWHERE or None), the vendor's Retry-After, and what a retry's metric calls it
    (default: the vendor's status, else "connection")."""

    error: GatewayError
    retry: str | None = None
    retry_after: float | None = None
    reason: str | None = None


class StreamDecoder(Protocol[T]):
    """An adapter's reading of one stream: its events as chunks, and whether its end came."""

    def read(self, events: list[Event]) -> tuple[list[T], bool, GatewayError | None]:
        """The chunks of one read's events, whether the stream's end marker came, and the fault
        that stopped the reading of them (None when they were all well-formed)."""

    def end(self) -> list[T]:
        """The body ended without an end marker: the chunks that adds (a protocol whose streams
        end with the body), or the GatewayError of a stream cut short."""


class JsonEvents(Generic[T]):
    """A StreamDecoder of the OpenAI protocol's streams (completions and chat): each event a JSON
    chunk, read by `read_chunk` (untrusted.py's errors when it is not one), up to `[DONE]`."""

    __slots__ = ("_name", "_config", "_read")

    def __init__(self, config: VendorConfig, read_chunk: Callable[[str], Any]) -> None:
        self._name = config.name
        self._config = config
        self._read = read_chunk

    def read(self, batch: list[Event]) -> tuple[list[T], bool, VendorFailed | None]:
        chunks = []
        read_chunk = self._read
        for sse in batch:
            if sse.data == "[DONE]":
                return chunks, True, None
            try:
                chunk = read_chunk(sse.data)
            except read.READ_ERRORS as exc:
                return chunks, False, VendorFailed(
                    f"vendor '{self._name}' sent a malformed stream chunk: {read.why(exc)}", vendor=self._name)
            except read.Reported as exc:
                message = redact(self._config, exc.message) or "no reason given"
                return chunks, False, VendorFailed(f"vendor '{self._name}' failed mid-stream: {message}",
                                                   vendor=self._name)
            if chunk.choices or chunk.usage is not None:  # an empty one says nothing (not even that it answers)
                chunks.append(chunk)
        return chunks, False, None

    def end(self) -> list[T]:
        raise VendorFailed(f"vendor '{self._name}' ended the stream early", vendor=self._name)


def as_is(data: Any) -> Any:
    return data


async def whole(config: VendorConfig, answer: Answer, member: str, read: Callable[[Any], R]) -> R | Failure:
    """A non-streamed answer, read to its end and read by the adapter, or the failure it is."""
    try:
        return read(orjson.loads(await read_body(answer, MAX_ANSWER_BYTES)))
    except TimeoutError as exc:
        return Failure(transport_error(config, exc, member), ELSEWHERE, reason="timeout")
    except TransportError as exc:
        return Failure(transport_error(config, exc, member), ANYWHERE)
    except TooLarge:
        return Failure(VendorFailed(f"vendor '{config.name}' sent an answer larger than {MAX_ANSWER_BYTES} bytes",
                                    vendor=config.name), ELSEWHERE, reason="malformed")
    except orjson.JSONDecodeError as exc:
        return Failure(VendorFailed(f"vendor '{config.name}' sent a malformed answer: not JSON (at byte {exc.pos})",
                                    vendor=config.name), ELSEWHERE, reason="malformed")
    except VendorFailed as exc:  # the adapter's reading: not its vendor's format
        return Failure(exc, ELSEWHERE, reason="malformed")


class Stream(Generic[T]):
    """One try's stream, read a piece at a time into its adapter's chunks. Held to the vendor's
    timeouts: `first_byte` for the first piece of the body (the head had its own: the
    transport's), `idle` between two pieces, `total` for the body as a whole, all kept by one
    timer (core/streams.py `Watch`; a wait never spans a yield of its reader)."""

    __slots__ = ("_config", "_answer", "_member", "_decoder", "_parser", "_watch", "_limit", "_ends", "_fault",
                 "finished")

    def __init__(self, config: VendorConfig, answer: Answer, member: str, decoder: StreamDecoder[T],
                 watch: Watch) -> None:
        self._config = config
        self._answer = answer
        self._member = member
        self._decoder = decoder
        self._parser = EventParser()
        self._watch = watch
        self._limit = config.timeouts.first_byte
        self._ends = watch.now() + config.timeouts.total
        self._fault: GatewayError | None = None  # came in the read of the chunks `next` returned last
        self.finished = False  # the stream's end came, well-formed: the deployment did its part

    async def first(self) -> list[T] | Failure:
        """The first chunks, or the failure a stream without any is (a fault before them: the
        answer did not start)."""
        chunks, fault = await self.next()
        if fault is not None:
            return Failure(fault, ELSEWHERE, reason="timeout" if isinstance(fault, VendorTimeout) else "malformed")
        if not chunks:
            return Failure(VendorFailed(f"vendor '{self._config.name}' ended the stream without an answer",
                                        vendor=self._config.name), ELSEWHERE, reason="malformed")
        return chunks

    async def next(self) -> tuple[list[T], GatewayError | None]:
        """The next chunks ([] once `finished`), or the vendor's fault that ends the stream (its
        connection broke or went quiet, it sent what is not its stream, it was cut short). What
        came before a fault in the same read still goes out first: the fault comes next time."""
        if self._fault is not None:
            return [], self._fault
        config = self._config
        read, wait, watch, parser, decoder = self._answer.read, self._watch.wait, self._watch, self._parser, self._decoder
        try:
            while not self.finished:
                piece = await wait(read(), min(watch.now() + self._limit, self._ends))
                if not piece:
                    chunks = decoder.end()
                    self.finished = True
                    return chunks, None
                self._limit = config.timeouts.idle
                if events := parser.feed(piece):
                    chunks, done, fault = decoder.read(events)
                    self.finished = done and fault is None
                    if chunks:
                        self._fault = fault
                        return chunks, None
                    if fault is not None:
                        return [], fault
        except (TransportError, TimeoutError) as exc:
            return [], transport_error(config, exc, self._member)
        except MalformedStream as exc:
            return [], VendorFailed(f"vendor '{config.name}' sent a malformed stream: {exc}", vendor=config.name)
        except GatewayError as exc:  # decoder.end(): cut short
            return [], exc
        return [], None
