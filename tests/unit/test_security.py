"""gateway/http/server/security.py's key check: expiry, a rotation's grace and scopes, on an injected
clock; the scopes openapi.json declares per operation; and a new key's limits known before any of
its requests passes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gateway.core.errors import AuthenticationFailed, PermissionDenied, StorageUnavailable
from gateway.http.server.security import limits_known, refused
from gateway.limits.rules import KEY, Limits, Subject
from gateway.store.accounts import SCOPES, Caller

SPEC = json.loads((Path(__file__).resolve().parents[2] / "openapi.json").read_text())
NOW = 1_800_000_000.0


def caller(**fields) -> Caller:
    return Caller("key_1", frozenset({"acct"}), **({"name": "ci bot"} | fields))


def test_a_valid_key_with_the_scope_passes():
    assert refused(caller(), ["inference"], NOW) is None
    assert refused(caller(expires=NOW + 1, ends=NOW + 1), ["usage"], NOW) is None
    assert refused(caller(scopes=frozenset()), [], NOW) is None  # an operation needing no scope


def test_a_missing_scope_is_a_403_naming_it_and_the_key():
    error = refused(caller(), ["admin"], NOW)
    assert isinstance(error, PermissionDenied) and error.code == "insufficient_scope"
    assert error.message == "key key_1 (ci bot) lacks the scope 'admin'"


def test_an_expired_key_is_a_401_saying_so_from_the_instant_it_expires():
    assert refused(caller(expires=NOW + 0.001), ["inference"], NOW) is None
    error = refused(caller(expires=NOW), ["inference"], NOW)
    assert isinstance(error, AuthenticationFailed) and error.code == "key_expired"
    assert error.message == "key key_1 (ci bot) expired at 2027-01-15T08:00:00Z"


def test_a_rotated_key_works_until_its_grace_ends():
    assert refused(caller(ends=NOW + 5, replaced_by="key_2"), ["inference"], NOW) is None
    error = refused(caller(ends=NOW + 5, replaced_by="key_2"), ["inference"], NOW + 5)
    assert isinstance(error, AuthenticationFailed) and error.code == "invalid_api_key"
    assert error.message == ("key key_1 (ci bot) was replaced by key_2 (a rotation) and stopped working at "
                             "2027-01-15T08:00:05Z")


def test_a_revoked_key_is_told_which_and_since_when():
    error = refused(caller(ends=NOW), ["inference"], NOW)
    assert isinstance(error, AuthenticationFailed) and error.code == "invalid_api_key"
    assert error.message == "key key_1 (ci bot) was revoked at 2027-01-15T08:00:00Z"


OPERATIONS = [(method.upper(), path, operation) for path, item in SPEC["paths"].items()
              for method, operation in item.items() if isinstance(operation, dict)]
OPERATORS = {"/readyz", "/metrics"}  # any key, or the metrics key: no scope (http/server/security.py is_operator)


@pytest.mark.parametrize("method,path,operation", OPERATIONS, ids=[f"{m} {p}" for m, p, _ in OPERATIONS])
def test_every_operation_taking_a_key_names_one_scope_for_both_schemes(method, path, operation):
    requirements = [r for r in operation.get("security", []) if r]
    if not requirements or path in OPERATORS:
        assert all(scopes == [] for r in requirements for scopes in r.values())
        return
    assert {name for r in requirements for name in r} == {"APIKeyHeader", "HTTPBearer"}
    (scopes,) = {tuple(scopes) for r in requirements for scopes in r.values()}
    assert len(scopes) == 1 and scopes[0] in SCOPES
    assert scopes[0] == ("admin" if path.startswith("/v5/admin/") else scopes[0])
    assert "403" in operation["responses"]


class Table:
    """The part of a LimitsTable limits_known reads: its subjects, and a read the test answers."""

    def __init__(self) -> None:
        self.subjects: dict = {}
        self.loads = 0
        self.answer: asyncio.Future | None = None

    async def load(self) -> None:
        self.loads += 1
        if self.answer is None:
            self.answer = asyncio.get_running_loop().create_future()
        await asyncio.shield(self.answer)


def test_every_request_of_a_new_limited_key_waits_for_its_limits():
    """Twenty requests at once of a key this gateway's copy of the limits has never held: none
    passes before the copy holds the key's limits (before, the first reread for all and the other
    nineteen went on without)."""
    async def scenario():
        table = Table()
        new = caller(limited=frozenset({("key", "key_1"), ("account", "acct")}))
        waiting = [asyncio.ensure_future(limits_known(table, new)) for _ in range(20)]
        for _ in range(3):
            await asyncio.sleep(0)
        assert not any(w.done() for w in waiting)
        table.subjects = {Subject(KEY, "key_1"): Limits(rpm=2), Subject("account", "acct"): Limits(rpm=9)}
        table.answer.set_result(None)
        await asyncio.gather(*waiting)
        asked = table.loads  # (the table reads once for all of them: tests/unit/test_limits.py)
        await limits_known(table, new)
        assert table.loads == asked  # known now: not read again

    asyncio.run(scenario())


def test_a_key_whose_limits_were_removed_rereads_once_per_lookup():
    async def scenario():
        table = Table()
        table.answer = asyncio.get_running_loop().create_future()
        table.answer.set_result(None)
        stale = Caller("key_removed", frozenset({"acct"}), limited=frozenset({("key", "key_removed")}))
        for _ in range(3):
            await limits_known(table, stale)
        looked_up_anew = Caller("key_removed", frozenset({"acct"}), limited=frozenset({("key", "key_removed")}))
        await limits_known(table, looked_up_anew)
        return table.loads

    assert asyncio.run(scenario()) == 2


def test_limits_that_cannot_be_read_refuse_the_request_with_a_503():
    class Away(Table):
        async def load(self) -> None:
            raise ConnectionError("database away")

    with pytest.raises(StorageUnavailable) as refused_:
        asyncio.run(limits_known(Away(), Caller("key_x", frozenset({"acct"}), limited=frozenset({("key", "key_x")}))))
    assert refused_.value.code == "database_unavailable" and "limits" in refused_.value.message
