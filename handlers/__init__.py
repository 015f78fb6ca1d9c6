"""operationId -> handler, explicitly: the spec's ids ("POST-V5-/v5/completions") are not Python
paths, and a missing entry must fail at start-up rather than as a 500 later."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from handlers import accounts, chat, completions, contract, health, metrics, models, usage, vendors

OPERATIONS: dict[str, Callable[..., Any]] = {
    "POST-V5-/v5/completions": completions.create,
    "POST-V5-/v5/chat/completions": chat.create,
    "GET-V5-/v5/chat/completions/models": models.chat_models,
    "GET-V5-/v5/models": models.openai_models,
    "GET-V5-/v5/usage": usage.report,
    "GET-V5-/v5/accounts": accounts.list_accounts,
    "GET-V5-/v5/vendors": vendors.list_vendors,
    "GET-/healthz": health.live,
    "GET-/readyz": health.ready,
    "GET-/metrics": metrics.scrape,
    "GET-/openapi.json": contract.openapi,
}


def resolve(operation_id: str) -> Callable[..., Any]:
    try:
        return OPERATIONS[operation_id]
    except KeyError:
        raise LookupError(f"openapi.json has operation {operation_id!r} but handlers/ has no handler for it") from None
