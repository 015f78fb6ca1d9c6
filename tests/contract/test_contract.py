"""The contract: openapi.json is valid OpenAPI 3.1, keeps the seed's shapes, and the running
gateway conforms to it under schemathesis with every check."""

from __future__ import annotations

import json

from openapi_spec_validator import validate

from tests.contract.fuzz import TARGETS, scoped_keys, short_fuzz
from tests.support.gateway_process import ROOT, GatewayProcess
from tests.support.provision import sqlite_database

# The vendor's original document, kept verbatim: our openapi.json evolves it compatibly.
SEED = ROOT / "tests" / "contract" / "seed" / "openapi-v5-completions.json"


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


def test_schemathesis_finds_nothing_in_any_operation_with_a_key_of_its_scope(upstream):
    """A bounded run of every operation, in front of the fake OpenAI vendor, each called with a key that
    holds the scope its security requirement names (one key per scope, none holding another's): no
    valid call is refused for its scope, and the administration's get through. On a database and
    gateway of its own: its stateful phase revokes and rotates the keys it lists. The other protocols'
    runs are in their vendor's test module; `make fuzz` runs the long ones."""
    with sqlite_database() as db, GatewayProcess(TARGETS["openai"].env(upstream.url, db.url)) as gateway:
        outcome = short_fuzz("openai", gateway.url, scoped_keys(db.url, gateway.url))
    assert outcome.returncode == 0, outcome.summary()
    assert outcome.calls["positive 200"] > 0 and outcome.calls["chat positive 200"] > 0, outcome.summary()
    assert outcome.calls["responses positive 200"] > 0, outcome.summary()
    assert outcome.calls["negative 422"] > 0 and outcome.calls["admin negative 422"] > 0, outcome.summary()
    positive = {kind for kind in outcome.calls if "positive" in kind}
    # Refused for its scope or account, never; for limits the stateful phase put on its key, rightly.
    allowed_by_limits = (" 403 model_not_allowed", " 403 model_unpriced")
    assert not [kind for kind in positive if " 403" in kind and not kind.endswith(allowed_by_limits)], \
        outcome.summary()
    admin = {kind.split()[-1] for kind in positive if kind.startswith("admin")}
    assert {"200", "201", "404"} <= admin, outcome.summary()


def test_the_usage_reports_names_in_the_spec_are_the_codes():
    """The outcomes and grouping dimensions openapi.json documents are the ones the ledger and the
    report know (one list each in the code; the spec must name the same)."""
    from gateway.store.meter import OUTCOMES
    from gateway.store.usage import DIMENSIONS

    spec = load(ROOT / "openapi.json")
    line = spec["components"]["schemas"]["UsageLine"]["properties"]
    assert line["outcome"]["$ref"] == "#/components/schemas/Outcome"
    assert tuple(spec["components"]["schemas"]["Outcome"]["enum"]) == OUTCOMES
    assert set(DIMENSIONS.values()) <= set(line)
    parameters = {p["name"]: p for p in spec["paths"]["/v5/usage"]["get"]["parameters"]}
    assert parameters["group_by"]["schema"]["pattern"] == "^({0})(,({0}))*$".format("|".join(DIMENSIONS))
    assert parameters["outcome"]["schema"]["pattern"] == "^({0})(,({0}))*$".format("|".join(OUTCOMES))


def test_the_usage_description_says_a_limits_refusals_are_counted():
    """A request a limit refused is recorded (outcome `refused`) and counted in a line's
    `refused_requests`: the report's description must say so, not that refusals go unrecorded."""
    from gateway.store.meter import REFUSED

    description = load(ROOT / "openapi.json")["paths"]["/v5/usage"]["get"]["description"]
    assert f"`{REFUSED}`" in description and "`refused_requests`" in description
