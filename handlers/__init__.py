"""operationId -> handler, explicitly: the spec's ids ("POST-V5-/v5/completions") are not Python
paths, and a missing entry must fail at start-up rather than as a 500 later: `gateway serve` and
`gateway config check` stop naming each operation without a handler, and each handler without its
operation (`unmatched`, asked by gateway/services.py `check`)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from handlers import (accounts, admin, chat, completions, contract, health, inference, metrics, models, responses, usage,
                      vendors)

OPERATIONS: dict[str, Callable[..., Any]] = {
    "POST-V5-/v5/completions": completions.create,
    "POST-V5-/v5/chat/completions": chat.create,
    "POST-V5-/v5/inference": inference.create,
    "POST-V5-/v5/responses": responses.create,
    "GET-V5-/v5/responses/{response_id}": responses.retrieve,
    "DELETE-V5-/v5/responses/{response_id}": responses.delete,
    "GET-V5-/v5/responses/{response_id}/input_items": responses.input_items_page,
    "GET-V5-/v5/chat/completions/models": models.chat_models,
    "GET-V5-/v5/models": models.openai_models,
    "GET-V5-/v5/models/{model}": models.openai_model,
    "GET-V5-/v5/usage": usage.report,
    "GET-V5-/v5/accounts": accounts.list_accounts,
    "GET-V5-/v5/vendors": vendors.list_vendors,
    "GET-/healthz": health.live,
    "GET-/readyz": health.ready,
    "GET-/metrics": metrics.scrape,
    "GET-/openapi.json": contract.openapi,
    # Each under its key's rate and concurrency (admin.limited), once per call.
    **{operation: admin.limited(handler) for operation, handler in {
        "POST-V5-/v5/admin/accounts": admin.create_account,
        "GET-V5-/v5/admin/accounts": admin.list_accounts,
        "POST-V5-/v5/admin/keys": admin.create_key,
        "GET-V5-/v5/admin/keys": admin.list_keys,
        "GET-V5-/v5/admin/keys/{key_id}": admin.get_key,
        "DELETE-V5-/v5/admin/keys/{key_id}": admin.revoke_key,
        "POST-V5-/v5/admin/keys/{key_id}/rotate": admin.rotate_key,
        "PUT-V5-/v5/admin/limits/keys/{key_id}": admin.put_limits,
        "GET-V5-/v5/admin/limits/keys/{key_id}": admin.get_limits,
        "PUT-V5-/v5/admin/limits/accounts/{account_id}": admin.put_limits,
        "GET-V5-/v5/admin/limits/accounts/{account_id}": admin.get_limits,
        "PUT-V5-/v5/admin/prices": admin.put_price,
        "GET-V5-/v5/admin/prices": admin.list_prices,
        "GET-V5-/v5/admin/audit": admin.audit,
    }.items()},
}


def resolve(operation_id: str) -> Callable[..., Any]:
    try:
        return OPERATIONS[operation_id]
    except KeyError:
        raise LookupError(f"openapi.json has operation {operation_id!r} but handlers/ has no handler for it") from None


def unmatched(operation_ids: Collection[str]) -> list[str]:
    """How the table differs from the contract's operations, which it must be exactly: an operation
    without a handler fails the start (`resolve`), and a handler whose operation the contract no
    longer has would otherwise stay behind unnoticed (tests/unit/test_handlers.py holds both)."""
    missing = sorted(set(operation_ids) - set(OPERATIONS))
    left = sorted(set(OPERATIONS) - set(operation_ids))
    return ([f"openapi.json has operation {operation!r} but handlers/ has no handler for it" for operation in missing]
            + [f"handlers/ has a handler for {operation!r}, an operation openapi.json does not have: remove it "
               "with its operation" for operation in left])
