"""GET /v5/vendors: the configured vendors and what each does with every request parameter, from
the same verdicts the planner enforces (gateway/planner/capabilities.py), and for a vendor served
from deployments, its routing and each deployment's state in this process (vendors/transport/balancer.py)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from gateway.core.endpoint import Endpoint
from gateway.core.parameters import PARAMETERS, Capabilities, Support, no_chat, unsupported
from gateway.core.responses import responses_verdicts
from gateway.http.context import HandlerRequest
from gateway.planner.capabilities import verdicts
from gateway.vendors.transport.balancer import Balancer, Snapshot
from gateway.vendors.base import Adapter, Balanced


async def list_vendors(request: HandlerRequest) -> Response:
    adapters = sorted(request.services.registry, key=lambda adapter: adapter.name)
    body = {"object": "list", "data": [_vendor(a) for a in adapters]}
    return Response(orjson.dumps(body), media_type="application/json")


def _vendor(adapter: Adapter) -> dict[str, Any]:
    body = describe(adapter.name, adapter.protocol, served(adapter, Endpoint.COMPLETIONS))
    body["chat_parameters"] = _parameters(served(adapter, Endpoint.CHAT))
    body["responses_parameters"] = {name: _support(found) for name, found in responses_fields(adapter).items()}
    server = getattr(adapter, "server", None)  # an OpenAI-compatible server's (vendors/openai/servers.py)
    if server is not None:
        body["server"] = server.name
    if isinstance(adapter, Balanced):
        body |= deployments(adapter.balancer)
    return body


def responses_fields(adapter: Adapter) -> dict[str, Support]:
    """Each Responses field's verdict: the translator's own where the vendor has the Responses API
    (vendors/openai/responses.py), else as its chat parameter's record says (bridged)."""
    own = getattr(adapter.translators.get(Endpoint.RESPONSES), "responses_fields", None)
    return dict(own) if own is not None else responses_verdicts(verdicts(served(adapter, Endpoint.RESPONSES)))


def served(adapter: Adapter, endpoint: Endpoint) -> Capabilities:
    """The adapter's record for `endpoint`: its translator's, or every parameter unsupported when
    its protocol has no translator for the endpoint (what a request for it is answered: a 400)."""
    translator = adapter.translators.get(endpoint)
    if translator is not None:
        return translator.capabilities
    reason = f"the {adapter.protocol} protocol does not serve {endpoint.path}"
    if endpoint is Endpoint.CHAT:
        return no_chat(adapter.protocol, reason)
    return Capabilities(adapter.protocol, {name: unsupported(reason) for name in PARAMETERS})


def deployments(balancer: Balancer) -> dict[str, Any]:
    """A vendor's routing and its deployments' state, as the `Vendor` schema's fields (never a
    deployment's key or URL: clients see names)."""
    return {"routing": balancer.routing, "deployments": [_deployment(s) for s in balancer.snapshot()]}


def _deployment(state: Snapshot) -> dict[str, Any]:
    body: dict[str, Any] = {
        "index": state.index,
        "name": state.name,
        "weight": state.weight,
        "state": state.state,
        "in_flight": state.in_flight,
        "consecutive_failures": state.consecutive_failures,
        "ejections": state.ejections,
        "tries": state.tries,
        "failures": state.failures,
    }
    if state.max_concurrent is not None:
        body["max_concurrent"] = state.max_concurrent
    if state.returns_in is not None:
        body["returns_in"] = round(state.returns_in, 3)
    if state.latency_ewma is not None:
        body["latency_ms"] = round(state.latency_ewma * 1000, 3)
    return body


def describe(name: str, protocol: str, capabilities: Capabilities) -> dict[str, Any]:
    """One vendor as the `Vendor` schema."""
    return {
        "name": name,
        "protocol": protocol,
        "parameters": _parameters(capabilities),
    }


def _parameters(capabilities: Capabilities) -> dict[str, Any]:
    return {param: _support(found) for param, found in verdicts(capabilities).items()}


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
