"""Running the app under uvicorn, with our connection protocol (http/server/connection.py: header and
keep-alive limits, errors the server writes itself, shutdown), in this process or in `workers`
processes serving one port.

With several workers this process only supervises: it binds a listening socket per worker, all on
the one port (`_listen`: the kernel spreads connections over them), starts each
worker (`serve_worker`, the one place where a worker process starts: each builds its own app,
vendors, database pool, ledger writer and limits), passes SIGTERM and SIGINT on to all of them
and exits when they have drained (0 when every one exited 0). A worker that dies after it was
serving is started again (`_exited` is where its end is noted); one that fails to start stops
the gateway. Workers are spawned, not forked: nothing of this process's state (event loop,
threads, connections) leaks into them.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import Any

import uvicorn

from gateway.core.config import Settings
from gateway.core.errors import ConfigError
from gateway.core.redaction import Redactor
from gateway.http.observe import log_stream, logs, metrics
from gateway.http.server import connection

log = logging.getLogger("gateway")

STARTUP_FAILED = 3  # a worker's exit code when its app did not start (uvicorn's own)


def listen(settings: Settings) -> list[socket.socket]:
    """The listening sockets of `run`, bound before anything starts: a port in use is an OSError
    here, before the gateway says it is ready or prints a key (uvicorn binds after the app started)."""
    return _listen(settings.host, settings.port, settings.workers)


def run(factory: Callable[[], Any], settings: Settings, redact: Redactor, built: Any = None,
        sockets: list[socket.socket] | None = None) -> int:
    """Serve until SIGTERM or SIGINT; the exit code. `factory` builds the app in each worker (it
    must pickle: workers are new processes); `built`, if given, is the app one worker serves;
    `sockets` are `listen`'s (default: bound here)."""
    sockets = sockets or listen(settings)
    if settings.workers == 1:
        return serve_worker(factory if built is None else (lambda: built), settings, redact, sockets[:1])
    return _supervise(factory, settings, redact, sockets)


_serving: Any = None  # a worker's: the Event set once any worker of its gateway serves


def serving() -> bool:
    """Whether this process's gateway is serving already: a worker of several that starts late, or
    again after one died, joins a running gateway (what it finds wrong is logged and refused per
    request, not a reason to stop the gateway). False while the gateway starts, and in one process."""
    return _serving is not None and _serving.is_set()


def serve_worker(factory: Callable[[], Any], settings: Settings, redact: Redactor,
                 sockets: list[socket.socket] | None = None, ready: Any = None, parent: int | None = None,
                 started: Any = None) -> int:
    """One worker: its logging, its app, its server; `ready` (an Event) is set once it serves, and
    `started` (an Event all the gateway's workers share) too; it stops when process `parent` (its
    supervisor) is gone."""
    global _serving
    _serving = started
    config = uvicorn.Config(
        factory(),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=connection.protocol(settings),
        ws="none",  # the API has no WebSocket routes: an upgrade request is served as plain HTTP
        # A failure of the app's start stops the start: with "auto", uvicorn took an exception that
        # escaped the lifespan (Connexion assembling its operations) for an app without one, and
        # served a 500 on every path.
        lifespan="on",
        # Nothing in the gateway reads the client's address or scheme that X-Forwarded-* headers
        # would rewrite; uvicorn's layer for them costs every request a pass over its headers.
        proxy_headers=False,
        timeout_keep_alive=settings.keep_alive_timeout,
        log_level=settings.log_level,
        access_log=False,
        timeout_graceful_shutdown=settings.shutdown_timeout,
    )
    # uvicorn.Config set up uvicorn's logging (replacing what the app's construction did); ours
    # goes on top of it again.
    logs.configure(settings.log_level, settings.log_format, redact)
    # After a graceful shutdown uvicorn restores the previous SIGTERM/SIGINT handlers and raises
    # the signal again, which by default kills the process with -15 even though all went well.
    # A handler that returns lets run() finish, and the gateway exits 0.
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: None)
    server = _Server(config, ready, parent)
    server.run(sockets=sockets)
    log_stream.flush_all()  # the access lines still waiting for their timer (http/observe/log_stream.py)
    return 0 if server.started else STARTUP_FAILED


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, ready: Any, parent: int | None) -> None:
        super().__init__(config)
        self._ready = ready
        self._parent = parent

    async def on_tick(self, counter: int) -> bool:
        if self._parent is not None and os.getppid() != self._parent:
            self.should_exit = True  # the supervisor is gone (killed): drain and stop, orphaned no longer
        return await super().on_tick(counter)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._ready is not None:
            self._ready.set()
            if _serving is not None:
                _serving.set()


def _worker_main(factory: Callable[[], Any], settings: Settings, redact: Redactor, sock: socket.socket,
                 ready: Any, parent: int, started: Any) -> None:
    # Its own process group: a terminal's Ctrl-C reaches the supervisor alone, which passes on one
    # SIGTERM (a second signal would make uvicorn cut its connections instead of draining them).
    os.setpgrp()
    try:
        code = serve_worker(factory, settings, redact, [sock], ready, parent, started)
    except ConfigError as exc:  # found by the supervisor first (services.check); one line here too, no traceback
        print(f"gateway: configuration error: {exc}", file=sys.stderr)
        code = STARTUP_FAILED
    raise SystemExit(code)


def _supervise(factory: Callable[[], Any], settings: Settings, redact: Redactor, sockets: list[socket.socket]) -> int:
    logs.configure(settings.log_level, settings.log_format, redact)
    context = multiprocessing.get_context("spawn")
    workers: list[tuple[BaseProcess, Any]] = []
    started = context.Event()  # set by the first worker that serves (`serving`)
    stopping = False
    code = 0

    def start(index: int) -> tuple[BaseProcess, Any]:
        ready = context.Event()
        process = context.Process(target=_worker_main,
                                  args=(factory, settings, redact, sockets[index], ready, os.getpid(), started),
                                  name=f"gateway-worker-{index}")
        process.start()
        return process, ready

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True
        for process, _ready in workers:
            if process.exitcode is None and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)  # each drains as one gateway does

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for index in range(settings.workers):
        workers.append(start(index))
    log.info("gateway serving http://%s:%s with %d workers (pids %s)", settings.host, settings.port,
             settings.workers, ", ".join(str(p.pid) for p, _ in workers))
    running = {p.sentinel for p, _ in workers}
    while running:
        wait(list(running), timeout=1.0)
        for index, (process, ready) in enumerate(workers):
            if process.sentinel not in running or process.exitcode is None:
                continue
            running.discard(process.sentinel)
            _exited(process)
            # One stopped before it served (SIGTERM while it started) had nothing to drain.
            stopped_early = stopping and not ready.is_set() and process.exitcode == -signal.SIGTERM
            if process.exitcode != 0 and not stopped_early:
                code = code or 1
            if stopping:
                continue
            if ready.is_set():
                log.warning("worker %s (pid %s) died with %s; starting another", index, process.pid, process.exitcode)
                workers[index] = start(index)  # on the same socket: what waits to be accepted is kept
                running.add(workers[index][0].sentinel)
            else:
                log.error("worker %s (pid %s) failed to start (exit %s); stopping the gateway", index, process.pid,
                          process.exitcode)
                code = STARTUP_FAILED
                stop()
    for sock in sockets:
        sock.close()
    return code


def _exited(process: BaseProcess) -> None:
    """A worker's end, noted in the supervisor (whatever outlives a worker is cleaned up here):
    its live gauges (in-flight requests) stop counting in the shared metrics."""
    log.info("worker pid %s exited with %s", process.pid, process.exitcode)
    if process.pid is not None:
        metrics.process_exited(process.pid)


def _listen(host: str, port: int, workers: int) -> list[socket.socket]:
    """A listening socket per worker, all on one port (SO_REUSEPORT), so that the kernel spreads
    new connections evenly over the workers. From one shared socket, whichever worker woke first
    accepted every connection of a burst, and kept-alive clients then loaded that worker alone
    (32 connections opened at once: one worker served them all). Where the option is missing,
    the workers share one socket."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    reuse_port = hasattr(socket, "SO_REUSEPORT") and workers > 1
    if reuse_port and port:
        # A port another process listens on is refused, as without the option: a second gateway
        # started on the same port must fail ("address in use"), not silently share its traffic.
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    sockets: list[socket.socket] = []
    try:
        for _ in range(workers if reuse_port else 1):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]  # port 0: the others take the port the first was given
            sock.listen(2048)
            sock.set_inheritable(True)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets * workers if len(sockets) == 1 else sockets
