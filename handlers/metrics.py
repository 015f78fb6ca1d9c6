"""GET /metrics: the Prometheus exposition of every process's counts (gateway/http/metrics.py)."""

from __future__ import annotations

import asyncio
import hmac

from starlette.responses import Response

from gateway.core.config import Settings
from gateway.core.errors import AuthenticationFailed, NotFound
from gateway.http import metrics
from gateway.http.context import HandlerRequest


async def scrape(request: HandlerRequest) -> Response:
    settings = request.services.settings
    if not settings.metrics:
        raise NotFound("metrics are turned off on this gateway (GATEWAY_METRICS=0)", code="metrics_disabled")
    if not _allowed(request, settings):
        raise AuthenticationFailed("the metrics need a key: GATEWAY_METRICS_KEY's"
                                   + (" or a gateway API key" if settings.metrics_api_keys else ""),
                                   code="metrics_key_required")
    metrics.flush()  # this process's latest counts; the others' are at most FLUSH_SECONDS old
    # Reading every process's files is blocking work; a scrape must not stall the requests being served.
    return Response(await asyncio.to_thread(metrics.render), media_type=metrics.CONTENT_TYPE)


def _allowed(request: HandlerRequest, settings: Settings) -> bool:
    secret = settings.metrics_key.get_secret_value()
    if not secret and not settings.metrics_api_keys:
        return True  # open: nothing configured to protect it
    if settings.metrics_api_keys and request.caller_or_none is not None:
        return True
    if not secret:
        return False
    headers = request.headers
    presented = headers.get("x-api-key") or ""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    candidates = [presented] + ([token.strip()] if scheme.lower() == "bearer" else [])
    return any(hmac.compare_digest(candidate.encode(), secret.encode()) for candidate in candidates if candidate)
