"""An OpenAI-compatible upstream that answers one request per connection, announces keep-alive,
and drops the connection when a second request arrives on it, without answering.

It plays, deterministically, the race llama.cpp's server loses at random: it closes its
connection after a streamed answer although it said keep-alive, so a pooled connection reused
at that moment dies before any answer.
"""

from __future__ import annotations

import asyncio
import json
import threading

from tests.support.fakes.server import free_port


class DroppingUpstream:
    def __init__(self) -> None:
        self.port = free_port()
        self.answered = 0
        self.dropped = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> DroppingUpstream:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._serve, "127.0.0.1", self.port),
                                                  self._loop)
        self._server = future.result(5)
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await _read_request(reader)
            if request is None:
                return
            writer.write(_answer(request))
            await writer.drain()
            self.answered += 1
            if await _read_request(reader) is not None:
                self.dropped += 1
        finally:
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> dict | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:  # the client closed the connection
        return None
    length = 0
    for line in head.decode().split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return json.loads(await reader.readexactly(length))


def _answer(request: dict) -> bytes:
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    if not request.get("stream"):
        body = json.dumps({"object": "text_completion", "choices": [{"index": 0, "text": " ok",
                                                                     "finish_reason": "length"}],
                           "usage": usage}).encode()
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    events = [{"choices": [{"index": 0, "text": " ok", "finish_reason": None}]},
              {"choices": [{"index": 0, "text": "", "finish_reason": "length"}], "usage": usage}]
    payload = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    chunked = hex(len(payload))[2:].encode() + b"\r\n" + payload + b"\r\n0\r\n\r\n"
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\n"
            b"Keep-Alive: timeout=5, max=100\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
