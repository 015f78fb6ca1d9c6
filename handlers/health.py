"""Liveness and readiness (GET /healthz, GET /readyz)."""

from __future__ import annotations

from starlette.responses import JSONResponse

from gateway.http.server import security
from gateway.http.context import HandlerRequest


async def live(request: HandlerRequest) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def ready(request: HandlerRequest) -> JSONResponse:
    """The status for anyone (load balancers send no key); what each check says, only to an
    operator (http/server/security.py `is_operator`): it names the database and Redis and quotes their errors."""
    services = request.services
    problems = services.registry.not_ready()
    # A database outage leaves the gateway ready: completions are served, usage rows wait in memory.
    # Taking every gateway sharing that database out of the load balancer would turn it into an outage.
    database = services.ledger.not_ready()
    limits = services.limiter.not_ready()  # a limits store away: requests are served or refused by policy
    status, code = ("starting", 503) if problems else ("degraded" if database or limits else "ok", 200)
    body: dict = {"status": status}
    if security.is_operator(request.headers, request.caller_or_none, services.settings):
        body["checks"] = ({name: "ok" for name in services.registry.names()} | problems
                          | {"database": database or "ok", "limits": limits or "ok"})
        if rejected := services.ledger.rejected_rows:  # readiness is not affected: later rows are written
            body["checks"]["ledger_rejects"] = f"{rejected} rows refused by the database since start (see that table)"
    return JSONResponse(body, status_code=code)
