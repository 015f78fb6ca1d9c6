"""POST /v5/chat/completions: the body as the contract's `ChatCompletionRequest`, served the one
way (http/serving.py) by the chat unit (gateway/endpoints/chat/)."""

from __future__ import annotations

from starlette.responses import Response

from gateway.endpoints.chat.unit import UNIT
from gateway.http.context import HandlerRequest
from gateway.http.serving import asked, serve
from generated.models import ChatCompletionRequest


async def create(request: HandlerRequest) -> Response:
    return await serve(request, UNIT, asked(request, ChatCompletionRequest))
