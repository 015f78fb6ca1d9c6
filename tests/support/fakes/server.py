"""Run an ASGI app on a free loopback port in a background thread (a real server, real sockets)."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    def __init__(self, app, port: int | None = None, **tls: str) -> None:
        """`tls`: uvicorn's ssl_certfile and ssl_keyfile, for an https server (tests/support/tls.py)."""
        self.port = port or free_port()
        self.scheme = "https" if tls else "http"
        # Keep idle connections open like hosted vendors do (a minute or more). With uvicorn's 5 s
        # default the fake closes them while the gateway's pool (it keeps them 15 s) may be reusing
        # one, and a request a few seconds after a burst failed now and then. Upstreams with short
        # keep-alives (vLLM, llama.cpp) are the vendor layer's to handle (tests/integration/test_llamacpp_upstream.py).
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off",
                                loop="asyncio", http="httptools", timeout_keep_alive=75, **tls)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


def serve(fake):
    """For a fixture: `fake` served on loopback for the fixture's life, its URL as `fake.url`."""
    with ServerThread(fake) as server:
        fake.url = server.url
        yield fake
