"""The gate on our own contract: the repository passes it (`make check-contract`, as CI runs it), every
breaking edit of openapi.json is refused with its change named even with a minor version, and
additive edits pass with a minor version and fail without one."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from contract import gate, versions
from contract.changes import Level, pointer
from tests.support.gateway_process import ROOT

SPEC = json.loads((ROOT / "openapi.json").read_text())
VERSION = SPEC["info"]["version"]
MINOR, MAJOR = versions.following(VERSION)[Level.ADDITIVE], versions.following(VERSION)[Level.BREAKING]
SCHEMAS = "#/components/schemas"


def schema(spec: dict, name: str) -> dict:
    return spec["components"]["schemas"][name]


def parameters(spec: dict, path: str, method: str = "get") -> list[dict]:
    return spec["paths"][path][method]["parameters"]


def parameter_at(path: str, name: str, *rest: str) -> str:
    index = next(i for i, p in enumerate(parameters(SPEC, path)) if p["name"] == name)
    return pointer("paths", path, "get", "parameters", index, *rest)


def remove_response_field(spec):
    schema(spec, "CompletionChoice")["properties"].pop("finish_reason")
    schema(spec, "CompletionChoice")["required"].remove("finish_reason")


def narrow_sort_order(spec):
    listed = parameters(spec, "/v5/chat/completions/models")
    next(p for p in listed if p["name"] == "sort_order")["schema"]["enum"] = ["asc"]


def remove_model_vendor(spec):
    listed = parameters(spec, "/v5/chat/completions/models")
    listed[:] = [p for p in listed if p["name"] != "model_vendor"]


def narrow_reasoning_effort(spec):
    schema(spec, "ChatCompletionRequest")["properties"]["reasoning_effort"]["enum"].remove("minimal")


# (edit, kind, where): the six, then more
BREAKING = {
    "a removed response field": (remove_response_field, "response-field-removed",
                                 f"{SCHEMAS}/CompletionChoice/properties/finish_reason"),
    "a newly required chat field": (lambda s: schema(s, "ChatCompletionRequest")["required"].append("temperature"),
                                    "request-field-required",
                                    f"{SCHEMAS}/ChatCompletionRequest/properties/temperature"),
    "a narrowed enum": (narrow_reasoning_effort, "enum-narrowed",
                        f"{SCHEMAS}/ChatCompletionRequest/properties/reasoning_effort/enum"),
    "a lowered maximum on a field of the seed's contract": (
        lambda s: schema(s, "CompletionRequest")["properties"]["temperature"].update(maximum=1), "maximum-tightened",
        f"{SCHEMAS}/CompletionRequest/properties/temperature/maximum"),
    "a removed operation": (lambda s: s["paths"]["/v5/admin/keys/{key_id}"].pop("delete"), "operation-removed",
                            pointer("paths", "/v5/admin/keys/{key_id}", "delete")),
    "another narrowed enum": (narrow_sort_order, "enum-narrowed",
                              parameter_at("/v5/chat/completions/models", "sort_order", "schema", "enum")),
    "a changed type": (lambda s: schema(s, "CompletionRequest")["properties"]["seed"].update(type=["string", "null"]),
                       "type-changed", f"{SCHEMAS}/CompletionRequest/properties/seed/type"),
    "a removed media type": (lambda s: s["paths"]["/v5/completions"]["post"]["responses"]["200"]["content"].pop(
        "text/event-stream"), "response-media-type-removed",
        pointer("paths", "/v5/completions", "post", "responses", "200", "content", "text/event-stream")),
    "a response field made optional": (lambda s: schema(s, "Completion")["required"].remove("created"),
                                       "response-field-optional", f"{SCHEMAS}/Completion/properties/created"),
    "a tightened pattern": (lambda s: schema(s, "FunctionDefinition")["properties"]["name"].update(
                                pattern="^[a-z_]{1,64}$"), "pattern-tightened",
                            f"{SCHEMAS}/FunctionDefinition/properties/name/pattern"),
    "a removed parameter": (remove_model_vendor, "parameter-removed",
                            parameter_at("/v5/chat/completions/models", "model_vendor")),
    "a lowered maxLength": (lambda s: schema(s, "CompletionRequest")["properties"]["model"].update(maxLength=64),
                            "maxLength-tightened", f"{SCHEMAS}/CompletionRequest/properties/model/maxLength"),
    "a widened response enum": (lambda s: schema(s, "Outcome")["enum"].append("vanished"), "enum-widened",
                                f"{SCHEMAS}/Outcome/enum"),
    "a response field made nullable": (lambda s: schema(s, "Completion")["properties"]["model"].update(
        type=["string", "null"]), "nullable-added", f"{SCHEMAS}/Completion/properties/model"),
    "a removed response": (lambda s: s["paths"]["/v5/admin/accounts"]["post"]["responses"].pop("201"),
                           "response-removed", pointer("paths", "/v5/admin/accounts", "post", "responses", "201")),
    "a removed request field": (lambda s: schema(s, "CompletionRequest")["properties"].pop("echo"),
                                "request-field-removed", f"{SCHEMAS}/CompletionRequest/properties/echo"),
    "a scope now needed": (lambda s: s["paths"]["/v5/completions"]["post"].update(
        security=[{"APIKeyHeader": ["admin"]}]), "security-changed",
        pointer("paths", "/v5/completions", "post", "security")),
}


def edited(edit, version: str) -> dict:
    spec = copy.deepcopy(SPEC)
    edit(spec)
    spec["info"]["version"] = version
    return spec


@pytest.mark.parametrize("name", BREAKING)
def test_a_breaking_edit_of_our_contract_is_refused_with_its_change_named(name):
    edit, kind, where = BREAKING[name]
    verdict = gate.judge(SPEC, edited(edit, MINOR), None)
    named = [change for change in verdict.changes if change.kind == kind and change.where == where]
    assert named and named[0].level == Level.BREAKING, "\n".join(change.line() for change in verdict.changes)
    assert verdict.problems == [f"info.version {MINOR} is a minor version, but a breaking change needs {MAJOR} (major)"]


def add_request_field(spec):
    schema(spec, "CompletionRequest")["properties"]["priority"] = {"type": "integer", "minimum": 0, "maximum": 9}


def add_operation(spec):
    spec["paths"]["/v5/things"] = {"get": {"operationId": "GET-V5-/v5/things", "security": [{"APIKeyHeader": []}],
                                           "responses": {"200": {"description": "the things", "content": {
                                               "application/json": {"schema": {"type": "object"}}}}}}}


def add_response_field(spec):
    schema(spec, "Completion")["properties"]["served_by"] = {"type": "string"}


ADDITIVE = {"a new optional request field": (add_request_field, "`priority`"),
            "a new operation": (add_operation, "GET /v5/things"),
            "a new response field": (add_response_field, "`served_by`")}


def unreleased(entry: str) -> str:
    """A changelog whose latest release is the contract these edits start from (openapi.json, taken as
    released), with `entry` alone under [Unreleased]: the repository's own changelog may hold entries
    of changes not yet released, which these edits do not make."""
    return f"# The contract's changelog\n\n## [Unreleased]\n\n### Added\n\n- {entry}\n\n## [{VERSION}] - 2026-01-01\n"


@pytest.mark.parametrize("name", ADDITIVE)
def test_an_additive_edit_of_our_contract_passes_with_a_minor_version_only(name):
    edit, entry = ADDITIVE[name]
    verdict = gate.judge(SPEC, edited(edit, MINOR), unreleased(entry))
    assert verdict.passes and verdict.needed == Level.ADDITIVE, verdict.problems
    unversioned = gate.judge(SPEC, edited(edit, VERSION), unreleased(entry))
    assert unversioned.problems == [f"openapi.json differs from the released contract {VERSION} "
                                    f"(contract/released.json) but info.version is still {VERSION}: its 1 change(s) "
                                    f"need {MINOR} (minor)"]


def test_the_repository_passes_the_gate():
    """What `make check-contract` runs on a fresh clone: openapi.json is the released contract, or
    carries the version and changelog entries its changes need."""
    ran = subprocess.run([sys.executable, "-m", "contract", "check"], cwd=ROOT, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.endswith("contract: passes\n")
