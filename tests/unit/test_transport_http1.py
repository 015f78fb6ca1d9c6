"""The gateway's own HTTP/1.1 client (vendors/transport/http1.py) against real loopback servers
that answer with exactly the bytes each test gives them: kept-alive connections, bodies of every
framing, and what a hostile or broken vendor may send."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.core.vendor_config import Timeouts
from gateway.vendors.transport.client import TransportError
from gateway.vendors.transport.http1 import MAX_BUFFERED, MAX_HEAD_BYTES, MAX_HEADERS, Http1Client

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}"


class Vendor:
    """A loopback server: `answer(request_bytes)` gives the bytes to write back (None: close
    without answering); every connection and request it saw is kept."""

    def __init__(self, answer: Callable[[bytes], bytes | None]) -> None:
        self.answer = answer
        self.close_after_answer = False
        self.connections = 0
        self.requests: list[bytes] = []
        self.closed_by_client = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.answer(request)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if self.close_after_answer:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_by_client.set()
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def vendor(answer: Callable[[bytes], bytes | None]) -> AsyncIterator[tuple[Vendor, str]]:
    fake = Vendor(answer)
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield fake, f"http://127.0.0.1:{port}/v1/completions"
    finally:
        server.close()


# Every timeout a test's client has, named here: one that ends a test waits for what the test set,
# never for a default of the settings (a minute for `first_byte`).
TIMEOUTS = {"connect": 10.0, "first_byte": 10.0, "idle": 10.0, "total": 10.0}


def client(**timeouts: float) -> Http1Client:
    return Http1Client({"authorization": "Bearer sk-test"}, Timeouts(**TIMEOUTS | timeouts))


async def body_of(answer) -> bytes:
    found = b""
    while piece := await answer.read():
        found += piece
    await answer.aclose()
    return found


def test_a_request_is_one_post_and_a_kept_alive_connection_serves_the_next():
    async def run() -> None:
        async with vendor(lambda request: OK) as (fake, url):
            http = client()
            for _ in range(3):
                answer = await http.send(url, b'{"prompt":"x"}')
                assert (answer.status, answer.header("Content-Type")) == (200, "application/json")
                assert await body_of(answer) == b'{"ok":true}'
            await http.aclose()
        assert fake.connections == 1
        head, _, body = fake.requests[0].partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        port = url.split(":")[2].split("/")[0]
        assert lines[0] == b"POST /v1/completions HTTP/1.1" and body == b'{"prompt":"x"}'
        assert {f"host: 127.0.0.1:{port}".encode(), b"authorization: Bearer sk-test",
                b"content-type: application/json", b"content-length: 14"} <= set(lines[1:])
        assert not any(line.lower().startswith(b"accept-encoding") for line in lines)  # nothing compressed

    asyncio.run(run())


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhello world",  # no length: the body ends with the connection
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nhello world",  # an interim answer first
])
def test_every_framing_of_a_body_is_read_to_its_end(answer):
    async def run() -> None:
        async with vendor(lambda request: answer) as (fake, url):
            fake.close_after_answer = b"connection: close" in answer
            got = await client().send(url, b"{}")
            assert got.status == 200 and await body_of(got) == b"hello world"

    asyncio.run(run())


def test_a_connection_closed_before_any_answer_is_dropped_and_one_closed_mid_body_is_broken():
    async def run() -> None:
        async with vendor(lambda request: None) as (fake, url):
            with pytest.raises(TransportError) as dropped:
                await client().send(url, b"{}")
            assert dropped.value.dropped  # the vendor did not serve it: vendors/transport/http.py sends it again
        async with vendor(lambda request: OK[:-4]) as (fake, url):  # 7 of the 11 bytes it announced
            fake.close_after_answer = True
            answer = await client().send(url, b"{}")
            with pytest.raises(TransportError) as broken:
                while await answer.read():
                    pass
            assert not broken.value.dropped and "before the answer's end" in str(broken.value)

    asyncio.run(run())


def test_a_head_past_its_bound_is_refused():
    huge = b"HTTP/1.1 200 OK\r\n" + b"".join(b"x-filler-%d: %s\r\n" % (i, b"y" * 1000) for i in range(80)) + b"\r\n"
    assert len(huge) > MAX_HEAD_BYTES

    async def run() -> None:
        async with vendor(lambda request: huge) as (fake, url):
            with pytest.raises(TransportError, match="head of more than"):
                await client().send(url, b"{}")

    asyncio.run(run())


def test_header_lines_past_their_bound_are_refused_however_small():
    # Repeats of one name are joined as they come: their number, not only their bytes, is bounded.
    many = b"HTTP/1.1 200 OK\r\n" + b"a: b\r\n" * (MAX_HEADERS + 1) + b"content-length: 0\r\n\r\n"
    assert len(many) < MAX_HEAD_BYTES

    async def run() -> None:
        async with vendor(lambda request: many) as (fake, url):
            with pytest.raises(TransportError, match="header lines"):
                await client().send(url, b"{}")

    asyncio.run(run())


def test_bytes_nobody_asked_for_close_the_connection_and_the_answer_before_them_is_whole():
    async def run() -> None:
        async with vendor(lambda request: OK + b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n") as (fake, url):
            http = client()
            for _ in range(2):
                assert await body_of(await http.send(url, b"{}")) == b'{"ok":true}'
        assert fake.connections == 2  # the first connection was not used again

    asyncio.run(run())


def test_an_answer_left_unread_closes_its_connection():
    async def run() -> None:
        async with vendor(lambda request: b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial") as (fake, url):
            answer = await client().send(url, b"{}")
            assert await answer.read() == b"partial"
            await answer.aclose()  # the caller left: the vendor hears it as the connection closing
            await asyncio.wait_for(fake.closed_by_client.wait(), 10)

    asyncio.run(run())


def test_waiting_for_the_answers_head_is_bounded_by_first_byte():
    async def run() -> None:
        async with vendor(lambda request: b"") as (fake, url):  # never answers
            with pytest.raises(TimeoutError):
                await client(first_byte=0.05).send(url, b"{}")

    asyncio.run(run())


def test_waiting_for_a_piece_of_the_body_is_bounded_by_total():
    async def run() -> None:
        head = b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n"
        async with vendor(lambda request: head + b'{"ok"') as (fake, url):  # the rest never comes
            answer = await client(total=0.05).send(url, b"{}")
            assert await answer.read() == b'{"ok"'
            with pytest.raises(TimeoutError):
                await answer.read()

    asyncio.run(run())


def test_a_vendor_that_cannot_be_reached_is_a_transport_error_not_a_drop():
    async def run() -> None:
        async with vendor(lambda request: OK) as (fake, url):
            pass  # closed: nothing listens there now
        with pytest.raises(TransportError) as refused:
            await client().send(url, b"{}")
        assert not refused.value.dropped and refused.value.reason == "connection refused"
        port = url.split(":")[2].split("/")[0]
        assert port in str(refused.value) and port not in refused.value.reason  # the address is for the log

    asyncio.run(run())


def test_a_big_body_is_read_whole_while_reading_pauses_past_the_buffer_bound():
    size = 4 * MAX_BUFFERED
    body = bytes(range(256)) * (size // 256)

    async def run() -> None:
        head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size
        async with vendor(lambda request: head + body) as (fake, url):
            answer = await client().send(url, b"{}")
            for _ in range(100_000):  # until the vendor's bytes, which nobody reads yet, pause reading
                if answer._connection._paused:
                    break
                await asyncio.sleep(0)
            assert answer._connection._paused
            assert answer._connection._buffered <= MAX_BUFFERED + (256 << 10)  # at most a read past the bound
            assert await body_of(answer) == body

    asyncio.run(run())


def test_a_header_value_with_a_line_break_is_refused_at_start():
    with pytest.raises(ValueError, match="line break"):
        Http1Client({"authorization": "Bearer sk\r\nx-injected: 1"}, Timeouts())
