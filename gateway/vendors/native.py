"""What every protocol's POST /v5/inference translator shares (vendors/<protocol>/inference.py):
the vendor's own body sent to its native endpoint, and its answer handed back as it came.

The translators do not read the answer: a whole answer is the vendor's decoded JSON, a stream's
each event's data text, each in a `NativeChoice` (core/inference.py). The endpoint reads them
(gateway/endpoints/inference/answers.py: depth, usage, the vendor's own end, its error events),
since the rules of what a native answer must hold are the endpoint's, not the protocol's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.core.completion import Chunk, Result
from gateway.core.inference import InferenceCall, NativeChoice
from gateway.vendors.transport.answers import as_is
from gateway.vendors.transport.http import HttpAdapter
from gateway.vendors.transport.sse_reader import Event


class RawEvents:
    """A StreamDecoder (vendors/transport/answers.py) that reads nothing: each event's data, as
    one chunk. The stream's end is the body's: whether the vendor's own last event came is the
    endpoint's to judge (answers.py `NativeStream.finish`)."""

    __slots__ = ()

    def read(self, events: list[Event]) -> tuple[list[Chunk], bool, None]:
        return [Chunk([NativeChoice(0, "", raw=event.data)]) for event in events if event.data], False, None

    def end(self) -> list[Chunk]:
        return []


def answer(raw: Any) -> Result:
    return Result([NativeChoice(0, "", raw=raw)])


class NativeTranslator:
    """POST the call's body to one path of an HTTP adapter (its pool, deployments, retries, key),
    a stream as server-sent events. `path` and `stream_path` give where, for the call's model."""

    def __init__(self, adapter: HttpAdapter) -> None:
        self._adapter = adapter

    def path(self, call: InferenceCall) -> str:
        raise NotImplementedError

    def stream_path(self, call: InferenceCall) -> str:
        return self.path(call)

    async def complete(self, call: InferenceCall) -> Result:
        return answer(await self._adapter._post_json(self.path(call), call.body, call, as_is))

    def stream(self, call: InferenceCall) -> AsyncIterator[list[Chunk]]:
        return self._adapter._sse_chunks(self.stream_path(call), call.body, call, RawEvents)
