"""GET /v5/accounts: the accounts the caller's key grants (what it may select, and what its usage
reports cover), for clients such as the usage dashboard that let a person choose one; with the
calling key's name and scopes, and the names of the keys granting those accounts (what the
reports' key ids are called)."""

from __future__ import annotations

import asyncio
import logging

from starlette.responses import Response

from gateway.core.errors import StorageUnavailable
from gateway.http.context import HandlerRequest
from gateway.store import accounts
from generated.models import Account, AccountKey, AccountList

log = logging.getLogger("gateway")

QUERY_TIMEOUT = 10.0  # seconds; past it the answer is a 503, not a request held open


async def list_accounts(request: HandlerRequest) -> Response:
    caller = request.caller
    try:
        async with asyncio.timeout(QUERY_TIMEOUT), request.services.database.connect() as connection:
            found = await accounts.list_accounts(connection, caller.accounts)
            keys = {key.id: key for account in sorted(caller.accounts)
                    for key in await accounts.list_keys(connection, account)}
    except Exception as exc:  # whatever stops the database answering, the caller can only retry
        log.warning("listing accounts failed: %s", f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        raise StorageUnavailable("the gateway's database is unavailable; retry later",
                                 code="database_unavailable") from None
    body = AccountList(object="list", key_id=caller.key_id, key_name=caller.name,
                       scopes=[scope for scope in accounts.SCOPES if scope in caller.scopes],
                       data=[Account(id=account.id, name=account.name) for account in found],
                       keys=[AccountKey(id=key.id, name=key.name) for key in keys.values()])
    return Response(body.model_dump_json(), media_type="application/json")
