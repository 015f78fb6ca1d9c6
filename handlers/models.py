"""GET /v5/chat/completions/models (EGP's shape), GET /v5/models (OpenAI's) and GET
/v5/models/{model} (one of OpenAI's): the models the configured vendors are known to serve, from
one list (`known`), and the configuration's aliases of them."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.datastructures import QueryParams
from starlette.responses import Response

from gateway.core.errors import NotFound, ValidationFailed, clip
from gateway.http.context import HandlerRequest, Services


def known(services: Services) -> list[tuple[str, str]]:
    """(vendor, model name) of every model a configured vendor is known to serve: the embedded
    model's own, the models the price table names for a configured vendor, and those of the
    fallback chains and aliases; sorted."""
    vendors = set(services.registry.names())
    found: set[tuple[str, str]] = set()
    for adapter in services.registry:
        own = getattr(adapter, "model", None)  # the embedded model names its one model
        if isinstance(own, str):
            found.add((adapter.name, own))
    for model in services.ledger.prices.models():
        found.add(tuple(model.split("/", 1)))  # type: ignore[arg-type]
    for model, chain in services.settings.fallbacks.items():
        for name in (model, *chain):
            found.add(tuple(name.split("/", 1)))  # type: ignore[arg-type]
    for name in services.settings.aliases.values():
        found.add(tuple(name.split("/", 1)))  # type: ignore[arg-type]
    return sorted(pair for pair in found if len(pair) == 2 and pair[0] in vendors)


async def chat_models(request: HandlerRequest) -> Response:
    query = QueryParams(request.scope["query_string"])  # validated against openapi.json already
    not_ready = request.services.registry.not_ready()
    aliases: dict[str, list[str]] = {}
    for alias, model in sorted(request.services.settings.aliases.items()):
        aliases.setdefault(model, []).append(alias)
    items = [{"model_name": name, "model_type": "chat_completion", "model_vendor": vendor,
              "model_availability": "unavailable" if vendor in not_ready else "available",
              **({"model_aliases": aliases[f"{vendor}/{name}"]} if f"{vendor}/{name}" in aliases else {})}
             for vendor, name in known(request.services)
             if query.get("model_vendor") in (None, vendor)]
    by_name = query.get("sort_by") == "model_name"
    items.sort(key=lambda m: (m["model_name"], m["model_vendor"]) if by_name else (m["model_vendor"], m["model_name"]),
               reverse=query.get("sort_order") == "desc")
    ids = [f"{m['model_vendor']}/{m['model_name']}" for m in items]
    if (after := query.get("starting_after")) in ids:
        items = items[ids.index(after) + 1:]
    elif (before := query.get("ending_before")) in ids:
        items = items[:ids.index(before)]
    items = items[:_limit(query.get("limit"))]
    return _json({"object": "list", "items": items})


def openai_entries(services: Services) -> list[dict[str, Any]]:
    """The models as OpenAI lists them, and the aliases beside them (each naming its model), sorted by id."""
    entries = [{"id": f"{vendor}/{name}", "object": "model", "created": 0, "owned_by": vendor}
               for vendor, name in known(services)]
    entries += [{"id": alias, "object": "model", "created": 0, "owned_by": model.partition("/")[0], "alias_for": model}
                for alias, model in services.settings.aliases.items()]
    return sorted(entries, key=lambda entry: entry["id"])


async def openai_models(request: HandlerRequest) -> Response:
    return _json({"object": "list", "data": openai_entries(request.services)})


async def openai_model(request: HandlerRequest) -> Response:
    """The one entry of GET /v5/models whose id is the path's rest: the id holds a `/`, which the
    contract's `format: path` lets the route take (as it is, or percent-encoded, as the openai SDK
    sends it)."""
    model = request.scope["path_params"]["model"]
    for entry in openai_entries(request.services):
        if entry["id"] == model:
            return _json(entry)
    raise NotFound(f"no model '{clip(model)}' among the models of GET /v5/models", code="model_not_found",
                   param="model")


def _limit(value: str | None) -> int:
    try:
        limit = int(value or 100)
    except ValueError:
        limit = 0
    if not 1 <= limit <= 1000:
        raise ValidationFailed([{"loc": ["query", "limit"], "msg": "limit is a whole number from 1 to 1000",
                                 "type": "value_error", "input": value}])
    return limit


def _json(body: dict[str, Any]) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")
