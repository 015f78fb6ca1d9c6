"""POST /v5/inference: the body as the contract's `InferenceRequest`, served the one way
(http/serving.py) by the vendor-native unit (gateway/endpoints/inference/)."""

from __future__ import annotations

from starlette.responses import Response

from gateway.endpoints.inference.unit import UNIT
from gateway.http.context import HandlerRequest
from gateway.http.serving import asked, serve
from generated.models import InferenceRequest


async def create(request: HandlerRequest) -> Response:
    return await serve(request, UNIT, asked(request, InferenceRequest))
