"""What a handler is given: the request (`HandlerRequest`) and, through it, the services a running
gateway holds for its whole life (`Services`, created and closed by the app's lifespan in
gateway/services.py). Handlers reach the services through the ASGI lifespan state, so several
apps can live in one process (tests) without globals."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.datastructures import Headers
from starlette.types import Scope

from gateway.core.config import Settings
from gateway.core.errors import ClientDisconnected
from gateway.core.redaction import Redactor
from gateway.limits.limiter import Limiter
from gateway.planner.admission import Admission
from gateway.store.accounts import Caller, KeyStore
from gateway.store.ledger import Ledger
from gateway.store.response_cache import Store
from gateway.store.response_writer import ResponseWriter
from gateway.vendors.registry import Registry

T = TypeVar("T")

BODY_KEY = "gateway.body"  # the parsed, validated JSON body, left in the scope by http/server/validation.py
CALLER_KEY = "caller"  # the authenticated Caller, in Connexion's token info (http/server/security.py)
DEPARTURE_KEY = "gateway.departure"  # the request's Departure, left in the scope by http/server/connection.py
BODY_ARRIVED_KEY = "gateway.body_arrived"  # True once the connection holds the whole body (http/server/connection.py)


class Departure:
    """How a request hears that its client left: the connection (http/server/connection.py) puts one in
    each request's scope and calls `client_left` when the connection is lost before the answer is
    complete; the task waiting in `HandlerRequest.unless_client_leaves` is then cancelled."""

    __slots__ = ("task", "left")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None  # set while a handler waits for its work
        self.left = False

    def client_left(self) -> None:
        self.left = True
        if self.task is not None:
            self.task.cancel()


@dataclass(slots=True)
class Services:
    settings: Settings
    registry: Registry
    database: AsyncEngine
    keys: KeyStore
    ledger: Ledger
    admission: Admission
    limiter: Limiter
    responses: ResponseWriter  # stored responses, kept off the request's path
    redact: Redactor  # every text that reaches a client or the log passes through it
    cache: Store | None = None  # the response cache's store (http/cache.py); None when GATEWAY_CACHE is off


class HandlerRequest:
    """A request as a handler sees it: the validated body, the caller, the headers, the services."""

    __slots__ = ("scope", "_headers")

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self._headers: Headers | None = None

    async def unless_client_leaves(self, work: Awaitable[T]) -> T:
        """`work`, cancelled the moment the client disconnects (then ClientDisconnected). A
        non-streamed answer is only sent once complete, so without this a client that left would
        keep its vendor call, its admission slot and an engine's time until the end, billed as
        completed. (A stream's response watches the connection itself: http/event_stream.py.)
        The work runs in the handler's own task, which the connection cancels when the client
        leaves: no task or watcher per request. Served by another server than the gateway's own
        (no Departure in the scope), the work runs to its end."""
        departure: Departure | None = self.scope.get("extensions", {}).get(DEPARTURE_KEY)
        if departure is None:
            return await work
        if departure.left:
            if asyncio.iscoroutine(work):
                work.close()
            raise ClientDisconnected()
        task = departure.task = asyncio.current_task()
        assert task is not None
        try:
            result = await work  # a cancellation reaches `work` where it waits, and its clean-up runs
        except BaseException:
            if not departure.left:
                raise
            task.uncancel()  # ours: it ends here, as ClientDisconnected
            raise ClientDisconnected() from None
        finally:
            departure.task = None
        if departure.left:  # the work swallowed the cancellation
            task.uncancel()
            raise ClientDisconnected()
        return result

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
