"""What a handler is given: the request (`HandlerRequest`) and, through it, the services a running
gateway holds for its whole life (`Services`, created and closed by the app's lifespan in
gateway/services.py). Handlers reach the services through the ASGI lifespan state, so several
apps can live in one process (tests) without globals."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.datastructures import Headers
from starlette.types import Receive, Scope

from gateway.core.config import Settings
from gateway.core.errors import ClientDisconnected
from gateway.core.redaction import Redactor
from gateway.planner.admission import Admission
from gateway.store.accounts import Caller, KeyStore
from gateway.store.ledger import Ledger
from gateway.store.limiter import Limiter
from gateway.vendors.registry import Registry

T = TypeVar("T")

BODY_KEY = "gateway.body"  # the parsed, validated JSON body, left in the scope by http/validation.py
CALLER_KEY = "caller"  # the authenticated Caller, in Connexion's token info (http/security.py)


@dataclass(slots=True)
class Services:
    settings: Settings
    registry: Registry
    database: AsyncEngine
    keys: KeyStore
    ledger: Ledger
    admission: Admission
    limiter: Limiter
    redact: Redactor  # every text that reaches a client or the log passes through it


class HandlerRequest:
    """A request as a handler sees it: the validated body, the caller, the headers, the services."""

    __slots__ = ("scope", "_receive", "_headers")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.scope = scope
        self._receive = receive
        self._headers: Headers | None = None

    async def unless_client_leaves(self, work: Awaitable[T]) -> T:
        """`work`, cancelled the moment the client disconnects (then ClientDisconnected). A
        non-streamed answer is only sent once complete, so without this a client that left would
        keep its vendor call, its admission slot and an engine's time until the end, billed as
        completed. (A stream's response watches the connection itself: http/event_stream.py.)"""
        task = asyncio.ensure_future(work)
        watcher = asyncio.ensure_future(self._disconnected())
        try:
            await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            if not task.done():
                task.cancel()
        if task.cancelled() or not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await task  # its clean-up (closing the vendor call) runs to the end
            raise ClientDisconnected()
        return task.result()

    async def _disconnected(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass  # the body again (the validator replays it once), or nothing else

    @property
    def body(self) -> Any:
        return self.scope["extensions"].get(BODY_KEY)

    @property
    def caller(self) -> Caller:
        return self.scope["extensions"]["connexion_context"]["token_info"][CALLER_KEY]

    @property
    def caller_or_none(self) -> Caller | None:
        """The caller on an operation whose key is optional (`{}` among its security
        requirements): None when no valid key came with the request."""
        return self.scope["extensions"]["connexion_context"]["token_info"].get(CALLER_KEY)

    @property
    def services(self) -> Services:
        return self.scope["state"]["services"]

    @property
    def headers(self) -> Headers:
        if self._headers is None:
            self._headers = Headers(scope=self.scope)
        return self._headers
