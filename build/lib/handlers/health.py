"""Liveness and readiness (GET /healthz, GET /readyz)."""

from __future__ import annotations

from starlette.responses import JSONResponse

from gateway.http.context import HandlerRequest


async def live(request: HandlerRequest) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def ready(request: HandlerRequest) -> JSONResponse:
    services = request.services
    problems = services.registry.not_ready()
    # A database outage leaves the gateway ready: completions are served, usage rows wait in memory.
    # Taking every gateway sharing that database out of the load balancer would turn it into an outage.
    database = services.ledger.not_ready()
    checks = {name: "ok" for name in services.registry.names()} | problems | {"database": database or "ok"}
    if problems:
        return JSONResponse({"status": "starting", "checks": checks}, status_code=503)
    return JSONResponse({"status": "degraded" if database else "ok", "checks": checks})
