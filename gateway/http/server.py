"""Running the app under uvicorn, with our connection protocol (http/connection.py: header and
keep-alive limits, errors the server writes itself, shutdown)."""

from __future__ import annotations

import signal
from typing import Any

import uvicorn

from gateway.core.config import Settings
from gateway.core.redaction import Redactor
from gateway.http import connection, logs


def run(app: Any, settings: Settings, redact: Redactor) -> None:
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=connection.protocol(settings),
        ws="none",  # the API has no WebSocket routes: an upgrade request is served as plain HTTP
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
    uvicorn.Server(config).run()
