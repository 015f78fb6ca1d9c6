"""gateway/http/security.py's key check: expiry, a rotation's grace and scopes, on an injected
clock; and the scopes openapi.json declares per operation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.core.errors import AuthenticationFailed, PermissionDenied
from gateway.http.security import refused
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
OPERATORS = {"/readyz", "/metrics"}  # any key, or the metrics key: no scope (http/security.py is_operator)


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
