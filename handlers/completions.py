"""POST /v5/completions: the body as the contract's `CompletionRequest`, served the one way
(http/serving.py) by the completions unit (gateway/endpoints/completions/)."""

from __future__ import annotations

from starlette.responses import Response

from gateway.endpoints.completions.unit import UNIT
from gateway.http.context import HandlerRequest
from gateway.http.serving import asked, serve
from generated.models import CompletionRequest


async def create(request: HandlerRequest) -> Response:
    return await serve(request, UNIT, asked(request, CompletionRequest))
