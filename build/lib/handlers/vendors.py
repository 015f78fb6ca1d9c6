"""GET /v5/vendors: the configured vendors and what each does with every request parameter, from
the same verdicts the planner enforces (gateway/planner/capabilities.py)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from gateway.core.parameters import Capabilities, Support
from gateway.http.context import HandlerRequest
from gateway.planner.capabilities import verdicts


async def list_vendors(request: HandlerRequest) -> Response:
    adapters = sorted(request.services.registry, key=lambda adapter: adapter.name)
    body = {"object": "list", "data": [describe(a.name, a.protocol, a.capabilities) for a in adapters]}
    return Response(orjson.dumps(body), media_type="application/json")


def describe(name: str, protocol: str, capabilities: Capabilities) -> dict[str, Any]:
    """One vendor as the `Vendor` schema."""
    return {
        "name": name,
        "protocol": protocol,
        "parameters": {param: _support(found) for param, found in verdicts(capabilities).items()},
    }


def _support(found: Support) -> dict[str, Any]:
    body: dict[str, Any] = {"support": found.kind}
    if found.detail:
        body["detail"] = found.detail
    if found.range is not None:
        body["minimum"] = found.range.minimum
        body["maximum"] = found.range.maximum
    if found.per_call is not None:
        body["per_call_limit"] = found.per_call
    return body
