"""The contract: openapi.json is valid OpenAPI 3.1, keeps the seed's shapes, and the running
gateway conforms to it under schemathesis with every check."""

from __future__ import annotations

import json

from openapi_spec_validator import validate

from tests.fuzz import fuzz
from tests.gateway_process import ROOT

# The vendor's original document, kept verbatim: our openapi.json evolves it compatibly.
SEED = ROOT / "tests" / "contract_seed" / "openapi-v5-completions.json"


def load(path):
    return json.loads(path.read_text())


def test_openapi_document_is_valid_3_1():
    spec = load(ROOT / "openapi.json")
    assert spec["openapi"].startswith("3.1")
    validate(spec)


def test_seed_operation_and_schemas_are_kept():
    spec, seed = load(ROOT / "openapi.json"), load(SEED)
    for path, methods in seed["paths"].items():
        for method, operation in methods.items():
            assert spec["paths"][path][method]["operationId"] == operation["operationId"]
    for name, schema in seed["components"]["schemas"].items():
        ours = spec["components"]["schemas"][name]
        assert set(schema.get("properties", {})) <= set(ours.get("properties", {})), name
        assert set(ours.get("required", [])) <= set(schema.get("required", [])) | {"error"}, name


def test_schemathesis_finds_nothing():
    assert fuzz(max_examples=100, extra=["--seed", "1"]) == 0
