"""Liveness and readiness (GET /healthz, GET /readyz)."""

from __future__ import annotations

from connexion import request
from starlette.responses import JSONResponse


async def live() -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def ready() -> JSONResponse:
    services = request.scope["state"]["services"]
    problems = services.registry.not_ready()
    checks = {name: "ok" for name in services.registry.names()} | problems
    if problems:
        return JSONResponse({"status": "starting", "checks": checks}, status_code=503)
    return JSONResponse({"status": "ok", "checks": checks})
