"""GET /metrics: the Prometheus exposition of every process's counts (gateway/http/observe/metrics.py)."""

from __future__ import annotations

import asyncio

from starlette.responses import Response

from gateway.core.config import Settings
from gateway.core.errors import AuthenticationFailed, NotFound
from gateway.http.observe import metrics
from gateway.http.server import security
from gateway.http.context import HandlerRequest


async def scrape(request: HandlerRequest) -> Response:
    settings = request.services.settings
    if not settings.metrics:
        raise NotFound("metrics are turned off on this gateway (GATEWAY_METRICS=0)", code="metrics_disabled")
    if not _allowed(request, settings):
        raise AuthenticationFailed(f"the {security.metrics_access(settings)}", code="metrics_key_required")
    metrics.flush()  # this process's latest counts; the others' are at most FLUSH_SECONDS old
    # Reading every process's files is blocking work; a scrape must not stall the requests being served.
    return Response(await asyncio.to_thread(metrics.render), media_type=metrics.CONTENT_TYPE)


def _allowed(request: HandlerRequest, settings: Settings) -> bool:
    return security.may_scrape(request.headers, request.caller_or_none, settings)
