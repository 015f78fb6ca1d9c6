"""Running the app under uvicorn, with a guard against clients that never finish their headers."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.core.config import Settings
from gateway.core.redaction import Redactor
from gateway.http import logs


def protocol(header_timeout: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing a connection whose request headers have not all
    arrived within `header_timeout` seconds of the connection or of the request's first byte
    (uvicorn itself only times out idle keep-alive connections, so a slow-headers client could
    hold a socket forever)."""

    class HeaderTimeoutProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_timer is None:
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

    return HeaderTimeoutProtocol


def run(app: Any, settings: Settings, redact: Redactor) -> None:
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=protocol(settings.header_timeout),
        log_level=settings.log_level,
        access_log=False,
        timeout_graceful_shutdown=30,
    )
    # uvicorn.Config set up uvicorn's logging; ours goes on top of it.
    logs.configure(settings.log_level, redact)
    # After a graceful shutdown uvicorn restores the previous SIGTERM/SIGINT handlers and raises
    # the signal again, which by default kills the process with -15 even though all went well.
    # A handler that returns lets run() finish, and the gateway exits 0.
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: None)
    uvicorn.Server(config).run()
