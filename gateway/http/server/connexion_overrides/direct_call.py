"""The handler call: an operation's innermost app is `await handler(HandlerRequest(scope))`.

Connexion's own (its AsyncOperation) rebuilds the operation's decorators on every request (three
inspections of the handler's signature) and injects the handler's arguments from the body, the
parameters and its context proxies. The gateway's handlers take one explicit argument instead
(http/context.py HandlerRequest: the validated body, the caller, the headers, the services), so
the handler is all the operation needs; Connexion still resolves it from the operationId."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

from connexion.apps.abstract import AbstractApp
from connexion.apps.asynchronous import AsyncApi, AsyncApp, AsyncASGIApp
from connexion.operations import AbstractOperation
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.core.errors import StartupFailed
from gateway.http.context import HandlerRequest

HOOKS: tuple[tuple[Any, str], ...] = (
    (AbstractApp, "__init__"),  # DirectCallApp runs it after setting its own _middleware_app
    (AsyncApp, "_middleware_app"),
    (AsyncASGIApp, "api_cls"),
    (AsyncApi, "make_operation"),
)

Handler = Callable[[HandlerRequest], Awaitable[Response]]


class HandlerOperation:
    """The innermost app of an operation: `response = await handler(HandlerRequest(scope))`."""

    def __init__(self, function: Handler) -> None:
        self.function = function

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.function(HandlerRequest(scope))
        await response(scope, receive, send)


class _HandlerApi(AsyncApi):
    def make_operation(self, operation: AbstractOperation) -> HandlerOperation:  # type: ignore[override]
        return HandlerOperation(operation.function)


class _HandlerASGIApp(AsyncASGIApp):
    api_cls = _HandlerApi


class DirectCallApp(AsyncApp):
    """An AsyncApp whose operations call handlers directly (see HandlerOperation)."""

    def __init__(self, import_name: str, **kwargs: Any) -> None:
        # AsyncApp.__init__ only creates its ASGI app and calls AbstractApp.__init__, which wraps
        # that app in the middleware stack: do the same with ours.
        self._middleware_app = _HandlerASGIApp()
        AbstractApp.__init__(self, import_name, **kwargs)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            send = _startup_reported(send)
        await self.middleware(scope, receive, send)  # as AbstractApp.__call__ does


def _startup_reported(send: Send) -> Send:
    """The lifespan's `send`, without the traceback Starlette attaches to a failed start (uvicorn logs
    it) when the lifespan has already said why in one line (StartupFailed)."""
    async def reporting(message: Any) -> None:
        if message["type"] == "lifespan.startup.failed" and isinstance(sys.exception(), StartupFailed):
            message = {**message, "message": ""}
        await send(message)

    return reporting
