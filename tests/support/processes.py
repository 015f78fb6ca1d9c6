"""Waiting for things, and the processes and servers a test watches: memory, workers, a gateway
served in this process."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tests.support.environments import SHARED_TLS

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.02,
               message: str = "") -> T:
    """The first truthy value of `predicate()`, polled every `interval` seconds. `timeout` is a
    safety net for a condition that never comes (then AssertionError), not a bound under test."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout}s: {message or predicate}")
        time.sleep(interval)


def memory(pid: int, field: str = "VmRSS") -> int:
    """A process's resident memory (VmRSS) or its peak (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        kib = next(line for line in status if line.startswith(f"{field}:")).split()[1]
    return int(kib) * 1024


def assert_responsive(gateway) -> None:
    """The gateway answers /healthz at once (a pinned event loop would hold it for seconds; the 1 s
    client timeout is a safety net, not a bound under test)."""
    assert httpx.get(f"{gateway.url}/healthz", timeout=1, verify=SHARED_TLS).status_code == 200


def off_loop(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` in a thread of its own: for code that runs its own event loop
    (asyncio.run) from a test whose thread already has one (Playwright's sync API keeps one)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(function, *args).result()


def children_of(pid: int) -> list[int]:
    """The processes `pid` started (a gateway's supervisor: its workers), from /proc."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def workers_of(pid: int) -> list[int]:
    """A gateway supervisor's workers (its other child is multiprocessing's resource tracker)."""
    workers = []
    for child in children_of(pid):
        try:
            if b"resource_tracker" not in Path(f"/proc/{child}/cmdline").read_bytes():
                workers.append(child)
        except OSError:
            pass  # it has just exited
    return workers


@contextlib.contextmanager
def served_in_process(app: Any, settings: Any):
    """`app` served by uvicorn on loopback (settings.port) in a thread of this process, with the
    gateway's own connection class and its lifespan, as `gateway serve` would; yields its URL."""
    import uvicorn

    from gateway.http.server import connection

    config = uvicorn.Config(app, host="127.0.0.1", port=settings.port, lifespan="on", loop="asyncio",
                            http=connection.protocol(settings), log_config=None, access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, message="the in-process gateway started")
    try:
        yield f"http://127.0.0.1:{settings.port}"
    finally:
        server.should_exit = True
        thread.join(30)
