"""The operationId -> handler table is the contract's operations exactly, both ways: an operation
removed from openapi.json must take its handler with it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from handlers import OPERATIONS, unmatched

SPEC = json.loads((Path(__file__).resolve().parents[2] / "openapi.json").read_text())
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def operation_ids(spec: dict) -> list[str]:
    return [operation["operationId"] for item in spec["paths"].values()
            for method, operation in item.items() if method in METHODS]


def test_the_table_is_the_contracts_operations():
    assert unmatched(operation_ids(SPEC)) == []


def test_a_removed_operation_whose_handler_stays_is_named():
    spec = copy.deepcopy(SPEC)
    removed = spec["paths"]["/v5/admin/keys/{key_id}"].pop("delete")["operationId"]
    assert removed in OPERATIONS
    assert unmatched(operation_ids(spec)) == [f"handlers/ has a handler for {removed!r}, an operation openapi.json "
                                              "does not have: remove it with its operation"]


def test_an_operation_without_a_handler_is_named():
    ids = [*operation_ids(SPEC), "GET-V5-/v5/widgets"]
    assert unmatched(ids) == ["openapi.json has operation 'GET-V5-/v5/widgets' but handlers/ has no handler "
                              "for it"]
