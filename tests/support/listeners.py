"""Loopback listeners that tell whether anything reached them: a server that records every
connection and request (and answers each with a JSON Schema, so a fetch succeeds and goes on), and
a black hole that lets connections in and never answers any."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class RecordingServer:
    """An HTTP server on loopback that records each connection it accepts and each request's path,
    and answers every GET with a JSON Schema (`{"type": "object"}`)."""

    def __init__(self) -> None:
        self.connections = 0
        self.paths: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.paths.append(self.path)
                body = json.dumps({"type": "object"}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/schema+json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def verify_request(self, request, client_address) -> bool:  # every accepted connection
                recorder.connections += 1
                return True

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def hits(self) -> int:
        return self.connections + len(self.paths)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class BlackHole:
    """A loopback port whose connections the kernel completes and nobody ever answers: a client
    that connects waits until its own timeout. Nothing accepts them, so each one that was made
    waits in the listening socket's queue: `connections()` counts them, however soon it is asked
    after the connect returned."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self._socket.setblocking(False)
        self._taken: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}"

    def connections(self) -> int:
        """Connections made to the black hole so far (each kept open, unanswered)."""
        while True:
            try:
                connection, _ = self._socket.accept()
            except BlockingIOError:
                return len(self._taken)
            self._taken.append(connection)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        for connection in self._taken:
            connection.close()
        self._socket.close()
