"""API keys -> callers -> the account a request is billed to.

A key is only ever compared by its SHA-256 digest: keys carry 256 random bits, so a fast hash is
as safe as a slow one and keeps the per-request check cheap. Keys, accounts and the store that
a running gateway uses live in the database (gateway/accounts.py).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Protocol

from gateway.errors import InvalidRequest, PermissionDenied

KEY_PREFIX = "sk-gw-"


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: the key's id (never the key) and the accounts it grants."""

    key_id: str
    accounts: frozenset[str]

    def account(self, selected: str | None) -> str:
        """The account a request is billed to, from the `x-selected-account-id` header."""
        if selected:
            if selected in self.accounts:
                return selected
            raise PermissionDenied(f"this key does not grant account '{selected}'", code="account_not_granted")
        if len(self.accounts) == 1:
            return next(iter(self.accounts))
        raise InvalidRequest(
            "this key grants several accounts: choose one with the x-selected-account-id header",
            code="account_required",
            param="x-selected-account-id",
        )

    def visible_accounts(self, selected: str | None) -> frozenset[str]:
        """The accounts a read (usage) may show: the selected one if granted, else every granted one."""
        return frozenset({self.account(selected)}) if selected else self.accounts


class KeyStore(Protocol):
    async def caller(self, key: str) -> Caller | None:
        """The caller a key belongs to, or None for an unknown or revoked key."""

