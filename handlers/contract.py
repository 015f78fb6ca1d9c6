"""GET /openapi.json: the contract this gateway serves, as installed (generated/openapi.json)."""

from __future__ import annotations

import functools

from starlette.responses import Response

from gateway.http.server.app import spec_path
from gateway.http.context import HandlerRequest


async def openapi(request: HandlerRequest) -> Response:
    return Response(_document(), media_type="application/json")


@functools.cache
def _document() -> bytes:
    return spec_path().read_bytes()
