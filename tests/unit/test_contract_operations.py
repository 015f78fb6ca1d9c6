"""The contract gate's rules for operations (contract/operations.py): paths, operations, parameters,
request bodies, responses, their media types and headers, and authentication."""

from __future__ import annotations

import pytest

from contract.changes import Level
from contract.operations import compare_documents
from tests.support.contract_specs import PATH, edited, operation, small_spec

POST = "#/paths/~1things~1{thing_id}/post"
GET = "#/paths/~1things~1{thing_id}/get"


def _parameter(spec: dict, name: str) -> dict:
    return next(p for p in operation(spec)["parameters"] if p["name"] == name)


def _without_parameter(name):
    def edit(spec):
        operation(spec)["parameters"] = [p for p in operation(spec)["parameters"] if p["name"] != name]
    return edit


def _add_parameter(required):
    return lambda s: operation(s)["parameters"].append({"name": "page", "in": "query", "required": required,
                                                        "schema": {"type": "string"}})


def _media_types(spec):
    body = operation(spec)["requestBody"]["content"]
    body["application/x-www-form-urlencoded"] = body.pop("application/json")


# (edit, kind, where, words of the message, the changelog names it)
BREAKING = {
    "an operation removed": (lambda s: s["paths"][PATH].pop("get"), "operation-removed", GET,
                             "operation GET /things/{thing_id} removed", True),
    "a path renamed": (lambda s: s["paths"].update({"/items/{thing_id}": s["paths"].pop(PATH)}), "operation-removed",
                       POST, "operation POST /things/{thing_id} removed", True),
    "an operationId changed": (lambda s: operation(s).update(operationId="create"), "operation-id-changed",
                               f"{POST}/operationId", "operationId changed from 'make' to 'create'", False),
    "a parameter removed": (_without_parameter("mode"), "parameter-removed", f"{POST}/parameters/1",
                            "query parameter `mode` removed", True),
    "a new required parameter": (_add_parameter(True), "parameter-required", f"{POST}/parameters/3",
                                 "new required query parameter `page`", True),
    "a parameter made required": (lambda s: _parameter(s, "mode").update(required=True), "parameter-required",
                                  f"{POST}/parameters/1", "query parameter `mode` made required", False),
    "a parameter's enum narrowed": (lambda s: _parameter(s, "mode")["schema"].update(enum=["a"]), "enum-narrowed",
                                    f"{POST}/parameters/1/schema/enum", 'query parameter `mode`: enum narrowed: "b"',
                                    False),
    "a parameter's serialization changed": (lambda s: _parameter(s, "mode").update(style="spaceDelimited"),
                                            "parameter-serialization-changed", f"{POST}/parameters/1/style",
                                            "style changed", False),
    "a request body removed": (lambda s: operation(s).pop("requestBody"), "request-body-removed", f"{POST}/requestBody",
                               "request body removed", False),
    "a required request body added": (lambda s: operation(s, "get").update(requestBody={
        "required": True, "content": {"application/json": {"schema": {"type": "object"}}}}), "request-body-added",
        f"{GET}/requestBody", "a required request body added", False),
    "a request media type removed": (_media_types, "request-media-type-removed",
                                     f"{POST}/requestBody/content/application~1json",
                                     "request body: media type application/json removed", False),
    "a response removed": (lambda s: operation(s)["responses"].pop("422"), "response-removed", f"{POST}/responses/422",
                           "response 422 removed", False),
    "a response media type removed": (lambda s: operation(s)["responses"]["200"]["content"].pop("text/event-stream"),
                                      "response-media-type-removed",
                                      f"{POST}/responses/200/content/text~1event-stream",
                                      "response 200: media type text/event-stream removed", False),
    "a response header removed": (lambda s: operation(s)["responses"]["200"].pop("headers"), "response-header-removed",
                                  f"{POST}/responses/200/headers/x-id", "response 200: header `x-id` removed", True),
    "a response header made optional": (lambda s: operation(s)["responses"]["200"]["headers"]["x-id"].pop("required"),
                                        "response-header-optional", f"{POST}/responses/200/headers/x-id",
                                        "header `x-id` made optional", False),
    "a response header's type widened": (
        lambda s: operation(s)["responses"]["200"]["headers"]["x-id"].update(schema={"type": ["string", "integer"]}),
        "type-changed", f"{POST}/responses/200/headers/x-id/schema/type", "response header `x-id`: type changed",
        False),
    "a scope now needed": (lambda s: operation(s).update(security=[{"Key": ["write"]}]), "security-changed",
                           f"{POST}/security", "now needs Key with scope write where it needed Key without a scope",
                           False),
    "a security scheme changed": (lambda s: s["components"]["securitySchemes"]["Key"].update(name="x-key"),
                                  "security-scheme-changed", "#/components/securitySchemes/Key",
                                  "security scheme Key changed", False),
}


@pytest.mark.parametrize("name", BREAKING)
def test_a_breaking_edit_is_refused_by_name_and_place(name):
    edit, kind, where, words, named = BREAKING[name]
    changes = compare_documents(small_spec(), edited(edit))
    hits = [change for change in changes if change.kind == kind and change.where == where]
    assert hits, "\n".join(change.line() for change in changes)
    assert hits[0].level == Level.BREAKING and words in hits[0].message and hits[0].named == named, hits[0].line()


ADDITIVE = {
    "an operation added": (lambda s: s["paths"][PATH].update(delete={"operationId": "remove", "responses": {
        "204": {"description": "gone"}}}), "operation-added", True),
    "an optional parameter added": (_add_parameter(False), "parameter-added", True),
    "a parameter made optional": (lambda s: _parameter(s, "thing_id").update(required=False), None, False),
    "a response added": (lambda s: operation(s)["responses"].update({"404": {"description": "none"}}), "response-added",
                         False),
    "a response media type added": (lambda s: operation(s)["responses"]["200"]["content"].update(
        {"text/plain": {"schema": {"type": "string"}}}), "response-media-type-added", False),
    "a response header added": (lambda s: operation(s)["responses"]["200"]["headers"].update(
        {"x-cost": {"schema": {"type": "string"}}}), "response-header-added", True),
    "an optional request body added": (lambda s: operation(s, "get").update(requestBody={
        "content": {"application/json": {"schema": {"type": "object"}}}}), "request-body-added", False),
    "another way to authenticate": (lambda s: operation(s)["security"].append({"Bearer": []}), "security-added", False),
    "authentication no longer needed": (lambda s: operation(s).update(security=[{}, {"Key": []}]), "security-added",
                                        False),
}


@pytest.mark.parametrize("name", ADDITIVE)
def test_an_additive_edit_is_named_and_not_breaking(name):
    edit, kind, named = ADDITIVE[name]
    changes = compare_documents(small_spec(), edited(edit))
    assert [change.line() for change in changes if change.level == Level.BREAKING] == []
    if kind is not None:
        hits = [change for change in changes if change.kind == kind]
        assert hits and hits[0].level == Level.ADDITIVE and hits[0].named == named, changes


def test_a_shared_parameter_is_followed_into_its_component():
    def shared(spec):
        spec["components"]["parameters"] = {"Mode": _parameter(spec, "mode")}
        operation(spec)["parameters"][1] = {"$ref": "#/components/parameters/Mode"}

    base = edited(shared)
    assert compare_documents(small_spec(), base) == []
    changes = compare_documents(base, edited(lambda s: s["components"]["parameters"]["Mode"]["schema"].update(
        enum=["b"]), spec=base))
    assert [(c.level, c.kind, c.where) for c in changes] == [
        (Level.BREAKING, "enum-narrowed", "#/components/parameters/Mode/schema/enum")]
