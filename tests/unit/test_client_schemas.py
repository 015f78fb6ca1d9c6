"""gateway/core/client_schemas.py: a client's JSON Schemas checked and compiled against nothing
outside themselves, within the bounds of a request; a loopback server records anything that
reaches it."""

from __future__ import annotations

import json

import jsonschema_rs
import pytest

from gateway.core import client_schemas
from gateway.core.client_schemas import DRAFTS, MAX_BYTES, MAX_DEPTH, MAX_OBJECTS, MAX_PATTERNS, REGEX_SIZE
from gateway.core.errors import ValidationFailed
from tests.support.listeners import RecordingServer

AT = ("tools", 0, "parameters")


@pytest.fixture(scope="module")
def recorder():
    with RecordingServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _nothing_reaches_the_recorder(recorder):
    before = recorder.hits
    yield
    assert recorder.hits == before, f"the check fetched {recorder.paths}"


def problems(schema, compiles=False):
    return list(client_schemas.problems([(AT, schema, compiles)]))


def nested(levels: int) -> dict:
    """A schema whose deepest object is `levels` levels down (the root is the first)."""
    schema: dict = {"type": "string"}
    for _ in range(levels - 1):
        schema = {"not": schema}
    return schema


def named(recorder, kind: str, where: str) -> str:
    """A document outside the schema: on the recorder, a file, relative to the base, and a draft's
    name jsonschema-rs does not carry (draft 7 is http), which it would fetch."""
    return {"http": f"{recorder.url}/{where}", "file": "file:///etc/passwd", "relative": f"{where}.json",
            "https": "https://json-schema.org/draft-07/schema#"}[kind]


@pytest.mark.parametrize("kind", ["http", "file", "relative", "https"])
@pytest.mark.parametrize("keyword, shape, path", [
    ("$schema", lambda v: {"$schema": v}, ()),
    ("$schema", lambda v: {"properties": {"a": {"$schema": v}}}, ("properties", "a")),
    ("$schema", lambda v: {"$defs": {"a": {"$id": "urn:a", "$schema": v}}}, ("$defs", "a")),
    ("$ref", lambda v: {"$ref": v}, ()),
    ("$ref", lambda v: {"$defs": {"unused": {"$ref": v}}}, ("$defs", "unused")),
    ("$ref", lambda v: {"items": [{"type": "string"}, {"$ref": v}]}, ("items", 1)),
    ("$ref", lambda v: {"$id": "http://127.0.0.1:9/base/", "properties": {"a": {"$ref": v}}}, ("properties", "a")),
    ("$dynamicRef", lambda v: {"properties": {"a": {"$dynamicRef": v}}}, ("properties", "a")),
    ("$recursiveRef", lambda v: {"$schema": "https://json-schema.org/draft/2019-09/schema", "$recursiveRef": v}, ()),
])
def test_what_names_a_document_outside_the_schema_is_refused_where_it_stands(recorder, kind, keyword, shape, path):
    value = named(recorder, kind, keyword.strip("$"))
    (problem,) = problems(shape(value))
    assert problem[0] == (*AT, *path, keyword)
    assert keyword in problem[1] and value in problem[1]


@pytest.mark.parametrize("draft", DRAFTS)
def test_the_known_drafts_are_taken_by_name_and_none_is_fetched(draft):
    asked: list[str] = []

    def retriever(uri: str):
        asked.append(uri)
        raise LookupError(uri)

    for name in {draft, draft.rstrip("#"), draft.rstrip("#") + "#"}:
        schema = {"$schema": name, "type": "object"}
        assert problems(schema, compiles=True) == []
        assert client_schemas.compiled(schema, AT).is_valid({}) and not client_schemas.compiled(schema, AT).is_valid(1)
        jsonschema_rs.validator_for(schema, retriever=retriever)
    assert asked == []  # jsonschema-rs carries each of them


@pytest.mark.parametrize("schema, good, bad", [
    ({"$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}}, "x", 1),
    ({"type": "object", "properties": {"child": {"$ref": "#"}}}, {"child": {"child": {}}}, {"child": {"child": 1}}),
    ({"$dynamicRef": "#node", "$defs": {"node": {"$dynamicAnchor": "node", "type": "string"}}}, "x", 1),
    ({"$id": "http://127.0.0.1:9/unreachable", "$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}}, "x", 1),
    ({"properties": {"$ref": {"type": "string"}, "$schema": {"type": "string"}}, "required": ["$ref"]},
     {"$ref": "x"}, {"$schema": "x"}),
])
def test_references_within_the_schema_are_kept_and_compile(schema, good, bad):
    assert problems(schema, compiles=True) == []
    validator = client_schemas.compiled(schema, AT)
    assert validator.is_valid(good) and not validator.is_valid(bad)


@pytest.mark.parametrize("schema", [
    {"$ref": "http://127.0.0.1:9/elsewhere"},
    {"$schema": "http://127.0.0.1:9/meta"},
    {"properties": {"a": {"$schema": "http://127.0.0.1:9/nested-meta"}}},
    {"$id": "http://127.0.0.1:9/base/", "$ref": "other.json"},
    {"$ref": "file:///etc/passwd"},
])
def test_jsonschema_rs_fetches_nothing_even_past_the_checks(recorder, schema):
    """Defence in depth: the compiled validator and the meta-schema check are given a retriever
    that refuses, so a name the checks did not see is an error (or ignored), never a request."""
    schema = json.loads(json.dumps(schema).replace("http://127.0.0.1:9", recorder.url))
    assert problems(schema) != []  # the checks see each of these; here they are passed by
    try:
        client_schemas.compiled(schema, AT)
    except ValidationFailed as exc:
        assert exc.detail[0]["loc"][:3] == list(AT)
    assert recorder.hits == 0


def test_a_schema_that_is_not_one_is_named_where_it_goes_wrong():
    (problem,) = problems({"properties": {"a": {"type": "nonsense"}}})
    assert problem[0] == (*AT, "properties", "a", "type") and "not a valid JSON Schema" in problem[1]


def test_a_strict_schema_that_cannot_be_compiled_is_a_422_where_it_stands():
    with pytest.raises(ValidationFailed) as dangling:
        client_schemas.compiled({"properties": {"a": {"$ref": "#/$defs/missing"}}}, ("body", "s"))
    assert dangling.value.detail[0]["loc"][:2] == ["body", "s"] and "missing" in dangling.value.detail[0]["msg"]
    with pytest.raises(ValidationFailed) as huge:
        client_schemas.compiled({"properties": {"a": {"pattern": "^.{0,5000}$"}}}, ("body", "s"))
    assert huge.value.detail[0]["loc"] == ["body", "s", "properties", "a", "pattern"]
    assert str(REGEX_SIZE) in huge.value.detail[0]["msg"]
    assert client_schemas.compiled({"pattern": "^.{0,200}$"}, ("body", "s")).is_valid("x" * 200)


# -- the bounds -----------------------------------------------------------------------------------

def test_the_bytes_of_a_requests_schemas_are_bounded_together():
    half = {"description": "x" * (MAX_BYTES // 2 - 40)}
    assert list(client_schemas.problems([(("a",), half, False), (("b",), half, False)])) == []
    found = list(client_schemas.problems([(("a",), half, False), (("b",), half, False),
                                          (("c",), {"description": "x" * 50}, False),
                                          (("d",), {"$ref": "http://127.0.0.1:9/x"}, False)]))
    assert found == [(("c",), (f"the request's JSON Schemas come to more than {MAX_BYTES} bytes together "
                               f"(the gateway's bound)"))]  # and nothing past it is looked at


def test_the_nesting_of_a_schema_is_bounded():
    assert problems(nested(MAX_DEPTH)) == []
    (problem,) = problems(nested(MAX_DEPTH + 1))
    assert problem[0] == (*AT, *["not"] * MAX_DEPTH)
    assert f"nested more than {MAX_DEPTH} levels" in problem[1]


def test_the_objects_of_a_requests_schemas_are_bounded_together():
    def object_of(count: int) -> dict:  # itself, its properties, and count - 2 properties
        return {"type": "object", "properties": {f"p{i}": {} for i in range(count - 2)}}

    first, rest = object_of(MAX_OBJECTS // 2), object_of(MAX_OBJECTS - MAX_OBJECTS // 2)
    assert list(client_schemas.problems([(("a",), first, False), (("b",), rest, False)])) == []
    found = list(client_schemas.problems([(("a",), first, False), (("b",), rest, False),
                                          (("c",), {"type": "object"}, False)]))
    assert found == [(("c",), (f"the request's JSON Schemas hold more than {MAX_OBJECTS} objects together "
                               f"(schemas and subschemas; the gateway's bound)"))]


def test_the_patterns_of_a_strict_schema_are_bounded():
    def with_patterns(count: int) -> dict:
        return {"properties": {f"p{i}": {"pattern": f"^{i}$"} for i in range(count)}}

    assert problems(with_patterns(MAX_PATTERNS), compiles=True) == []
    assert problems(with_patterns(MAX_PATTERNS + 1)) == []  # a tool's: the gateway never compiles it
    (problem,) = problems(with_patterns(MAX_PATTERNS + 1), compiles=True)
    assert problem[0] == AT and f"more than the {MAX_PATTERNS}" in problem[1]
