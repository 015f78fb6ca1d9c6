"""GET /v5/vendors: the configured vendors and what each does with every request parameter, from
the same verdicts the planner enforces (gateway/capabilities.py)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from gateway.capabilities import Verdict, verdicts
from gateway.lean import Incoming
from vendors.base import Adapter


async def list_vendors(request: Incoming) -> Response:
    adapters = sorted(request.services.registry, key=lambda adapter: adapter.name)
    body = {"object": "list", "data": [describe(adapter) for adapter in adapters]}
    return Response(orjson.dumps(body), media_type="application/json")


def describe(adapter: Adapter) -> dict[str, Any]:
    return {
        "name": adapter.name,
        "protocol": adapter.protocol,
        "parameters": {name: _support(found) for name, found in verdicts(adapter.capabilities).items()},
    }


def _support(found: Verdict) -> dict[str, Any]:
    body: dict[str, Any] = {"support": found.support}
    if found.detail:
        body["detail"] = found.detail
    if found.range is not None:
        body["minimum"] = found.range.minimum
        body["maximum"] = found.range.maximum
    if found.limit is not None:
        body["per_call_limit"] = found.limit
    return body
