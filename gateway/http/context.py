"""What a handler is given: the request (`HandlerRequest`) and, through it, the services a running
gateway holds for its whole life (`Services`, created and closed by the app's lifespan in
gateway/services.py). Handlers reach the services through the ASGI lifespan state, so several
apps can live in one process (tests) without globals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.datastructures import Headers
from starlette.types import Scope

from gateway.core.config import Settings
from gateway.planner.admission import Admission
from gateway.store.accounts import Caller, KeyStore
from gateway.store.ledger import Ledger
from gateway.vendors.registry import Registry

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


class HandlerRequest:
    """A request as a handler sees it: the validated body, the caller, the headers, the services."""

    __slots__ = ("scope", "_headers")

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self._headers: Headers | None = None

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
