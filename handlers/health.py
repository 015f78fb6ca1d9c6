"""Liveness and readiness (GET /healthz, GET /readyz)."""

from __future__ import annotations

from starlette.responses import JSONResponse

from gateway.lean import Incoming


async def live(request: Incoming) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def ready(request: Incoming) -> JSONResponse:
    services = request.services
    problems = services.registry.not_ready()
    checks = {name: "ok" for name in services.registry.names()} | problems
    if problems:
        return JSONResponse({"status": "starting", "checks": checks}, status_code=503)
    return JSONResponse({"status": "ok", "checks": checks})
