"""POST /v5/responses and the stored responses (GET, DELETE, input items): the body as the
contract's `ResponseCreateRequest`, its stored conversation read for its account, served the one
way (http/serving.py) by the responses unit (gateway/endpoints/responses/); a plain answer kept,
and sent once its writer's batch has committed (a stream keeps itself: http/response_events.py),
so that every worker finds it (store/response_writer.py, which bounds that wait): a read first
looks among its pending responses, or awaits the commit of the id it names. Every read is scoped to the caller's account: another
account's id is the 404 an unknown one is (store/responses.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.datastructures import QueryParams
from starlette.responses import Response

from gateway.core.errors import BadRequest, NotFound
from gateway.endpoints.responses.request import input_items
from gateway.endpoints.responses.unit import UNIT, AskedResponses
from gateway.http.context import HandlerRequest
from gateway.http.serving import asked, serve
from gateway.store import database
from gateway.store.responses import ChainTooLong, ResponseNotFound
from generated.models import ResponseCreateRequest


def _now() -> datetime:
    return datetime.now(UTC)


def _account(request: HandlerRequest) -> str:
    return request.caller.account(request.headers.get("x-selected-account-id"))


def _not_found(exc: ResponseNotFound) -> NotFound:
    return NotFound(str(exc), code=exc.code, param="response_id")


async def create(request: HandlerRequest) -> Response:
    parsed = asked(request, ResponseCreateRequest)
    body = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
    services = request.services
    writer = services.responses
    history: list[dict[str, Any]] = []
    if (previous := body.get("previous_response_id")) is not None:
        try:
            await writer.flushed(_account(request), previous)
            async with services.database.connect() as connection:
                history = await writer.store.chain(connection, _account(request), previous, _now())
        except ResponseNotFound as exc:
            raise NotFound(str(exc), code=exc.code, param="previous_response_id") from None
        except ChainTooLong as exc:
            raise BadRequest(str(exc), code=exc.code, param="previous_response_id") from None
    answer = await serve(request, UNIT, AskedResponses(body, history))
    if not body.get("stream") and body.get("store") is not False and answer.status_code == 200:
        # Sent once committed (bounded): a chain through another worker then finds it.
        await writer.stored(writer.keep(_account(request), orjson.loads(answer.body), input_items(body), _now()))
    return answer


def _json(value: Any) -> Response:
    return Response(orjson.dumps(value), media_type="application/json")


async def retrieve(request: HandlerRequest) -> Response:
    response_id = request.scope["path_params"]["response_id"]
    writer = request.services.responses
    if (pending := writer.pending(_account(request), response_id)) is not None:
        return _json(pending)
    try:
        async with request.services.database.connect() as connection:
            found = await writer.store.get(connection, _account(request), response_id, _now())
    except ResponseNotFound as exc:
        raise _not_found(exc) from None
    return _json(found)


async def delete(request: HandlerRequest) -> Response:
    response_id = request.scope["path_params"]["response_id"]
    writer = request.services.responses
    await writer.flushed(_account(request), response_id)
    try:
        async with database.writing(request.services.database) as connection:
            deleted = await writer.store.delete(connection, _account(request), response_id, _now())
    except ResponseNotFound as exc:
        raise _not_found(exc) from None
    return _json(deleted)


async def input_items_page(request: HandlerRequest) -> Response:
    response_id = request.scope["path_params"]["response_id"]
    query = QueryParams(request.scope["query_string"])  # validated against openapi.json already
    for value in query.getlist("include"):  # what it names (an image's URL, a file's) is never kept apart
        raise BadRequest(f"include '{value}' is not served: the items are listed as they were given",
                         code="unsupported_parameter", param="include")
    writer = request.services.responses
    await writer.flushed(_account(request), response_id)
    try:
        async with request.services.database.connect() as connection:
            page = await writer.store.input_items(connection, _account(request), response_id, _now(),
                                           after=query.get("after"), before=query.get("before"),
                                           limit=int(query.get("limit") or 20),
                                           order="asc" if query.get("order") == "asc" else "desc")
    except ResponseNotFound as exc:
        raise _not_found(exc) from None
    return _json(page.wire())
