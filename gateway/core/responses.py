"""A Responses request's vendor call (POST /v5/responses) where the vendor is asked through chat:
the conversation the request and its stored chain make, as a chat call, counted under its own
endpoint. The protocols' chat translators serve it as any `ChatCall` (endpoints/responses/request.py
made it); the ledger, the limits, the cache's key and the traces name `responses`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gateway.core.chat import ChatCall
from gateway.core.endpoint import Endpoint


@dataclass(slots=True)
class ResponsesCall(ChatCall):
    endpoint: ClassVar[Endpoint] = Endpoint.RESPONSES
