"""A raw HTTP/1.1 client for tests that must send what no HTTP library would (huge or endless
heads, pipelined requests, bodies that never arrive) and read exactly what the gateway answers."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Self

import pytest

# Long enough for anything the gateway does on loopback; reaching it means the gateway did not act.
SAFETY = 30.0


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


class Client:
    """A raw HTTP/1.1 client connection, reading whole responses off one buffer."""

    def __init__(self, port: int, receive_buffer: int | None = None) -> None:
        self.sock = socket.socket()
        if receive_buffer:  # before connecting, so the window the server sees is small from the start
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(SAFETY)
        self.sock.connect(("127.0.0.1", port))
        self.buffer = b""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def head(self) -> Answer:
        """The status and headers of the next response, leaving its body unread."""
        status_line, *header_lines = self._until(b"\r\n\r\n").decode().split("\r\n")
        headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in header_lines)}
        return Answer(int(status_line.split()[1]), headers, b"")

    def answer(self) -> Answer:
        """The next whole response (Content-Length or chunked)."""
        answer = self.head()
        headers = answer.headers
        if "content-length" in headers:
            body = self._exactly(int(headers["content-length"]))
        else:
            body = b""
            while size := int(self._until(b"\r\n"), 16):
                body += self._exactly(size)
                self._until(b"\r\n")
            self._until(b"\r\n")
        answer.body = body
        return answer

    def closed_by_gateway(self) -> bytes:
        """Everything the gateway still sends, once it has closed the connection (EOF or reset)."""
        data, self.buffer = self.buffer, b""
        try:
            while chunk := self.sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
        except TimeoutError:
            pytest.fail(f"the connection was still open after {SAFETY:g}s")
        return data

    def _until(self, mark: bytes) -> bytes:
        while mark not in self.buffer:
            self._receive()
        found, self.buffer = self.buffer.split(mark, 1)
        return found

    def _exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._receive()
        found, self.buffer = self.buffer[:size], self.buffer[size:]
        return found

    def _receive(self) -> None:
        data = self.sock.recv(65536)
        assert data, "the gateway closed the connection mid-response"
        self.buffer += data


def request(path: str, method: str = "GET", headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "host: gateway", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    if body and not any(k.lower() == "content-length" for k in headers or {}):
        lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
