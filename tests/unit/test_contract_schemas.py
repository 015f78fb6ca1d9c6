"""The contract gate's rules for schemas (contract/schemas.py, keywords.py, structures.py): each edit
of a small contract is judged in the direction its schema travels, and named with where it is."""

from __future__ import annotations

import copy

import pytest

from contract.changes import Level
from contract.operations import compare_documents
from tests.support.contract_specs import PATH, edited, schemas, small_spec

REQUEST = "#/components/schemas/Request/properties"
ANSWER = "#/components/schemas/Answer/properties"


def request(spec: dict) -> dict:
    return schemas(spec)["Request"]["properties"]


def answer(spec: dict) -> dict:
    return schemas(spec)["Answer"]["properties"]


def _add_required_seed(spec):
    request(spec)["seed"] = {"type": "integer"}
    schemas(spec)["Request"]["required"].append("seed")


def _stop_without(kind):
    def edit(spec):
        request(spec)["stop"]["anyOf"] = [b for b in request(spec)["stop"]["anyOf"] if b["type"] != kind]
    return edit


# (edit, kind, where, words of the message): each a change a deployed client can break on
BREAKING = {
    "a new required request field": (_add_required_seed, "request-field-required", f"{REQUEST}/seed",
                                     "new required request field `seed`"),
    "a request field made required": (lambda s: schemas(s)["Request"]["required"].append("effort"),
                                      "request-field-required", f"{REQUEST}/effort", "`effort` made required"),
    "a request field removed": (lambda s: request(s).pop("when"), "request-field-removed", f"{REQUEST}/when",
                                "request field `when` removed"),
    "a request enum narrowed": (lambda s: request(s)["effort"].update(enum=["low"]), "enum-narrowed",
                                f"{REQUEST}/effort/enum", 'enum narrowed: "high" removed'),
    "a maximum lowered": (lambda s: request(s)["n"].update(maximum=4), "maximum-tightened", f"{REQUEST}/n/maximum",
                          "maximum lowered from 8 to 4"),
    "an exclusiveMaximum added": (lambda s: request(s)["n"].update(exclusiveMaximum=8), "exclusiveMaximum-tightened",
                                  f"{REQUEST}/n/exclusiveMaximum", "exclusiveMaximum 8 added"),
    "a minimum raised": (lambda s: request(s)["n"].update(minimum=2), "minimum-tightened", f"{REQUEST}/n/minimum",
                         "minimum raised from 1 to 2"),
    "a maxLength lowered": (lambda s: request(s)["model"].update(maxLength=32), "maxLength-tightened",
                            f"{REQUEST}/model/maxLength", "maxLength lowered from 64 to 32"),
    "a minLength raised": (lambda s: request(s)["model"].update(minLength=5), "minLength-tightened",
                           f"{REQUEST}/model/minLength", "minLength raised from 3 to 5"),
    "a maxItems lowered": (lambda s: request(s)["tags"].update(maxItems=2), "maxItems-tightened",
                           f"{REQUEST}/tags/maxItems", "maxItems lowered from 4 to 2"),
    "a minItems added": (lambda s: request(s)["tags"].update(minItems=1), "minItems-tightened",
                         f"{REQUEST}/tags/minItems", "minItems 1 added"),
    "a pattern tightened": (lambda s: request(s)["model"].update(pattern="^[a-z]+/[a-z]+$"), "pattern-tightened",
                            f"{REQUEST}/model/pattern", "which refuses"),
    "a pattern added": (lambda s: request(s)["when"].update(pattern="^[0-9]+$"), "pattern-added",
                        f"{REQUEST}/when/pattern", "pattern '^[0-9]+$' added"),
    "additionalProperties made false": (lambda s: request(s)["options"].update(additionalProperties=False),
                                        "additional-properties-changed", f"{REQUEST}/options/additionalProperties",
                                        "fields it does not name are now refused"),
    "an alternative removed": (_stop_without("array"), "alternative-removed", f"{REQUEST}/stop/anyOf/1",
                               "alternative of type array removed"),
    "a const added": (lambda s: request(s)["when"].update(const="now"), "const-added", f"{REQUEST}/when/const",
                      'now restricted to "now"'),
    "a format added": (lambda s: request(s)["when"].update(format="date-time"), "format-added",
                       f"{REQUEST}/when/format", "format date-time added"),
    "a request type changed": (lambda s: request(s)["n"].update(type=["string", "null"]), "type-changed",
                               f"{REQUEST}/n/type", "type changed from integer to string"),
    "null no longer accepted": (lambda s: request(s)["n"].update(type="integer"), "null-refused", f"{REQUEST}/n",
                                "no longer accepts null"),
    "a null alternative removed": (_stop_without("null"), "null-refused", f"{REQUEST}/stop", "no longer accepts null"),
    "a default changed": (lambda s: request(s)["n"].update(default=2), "default-changed", f"{REQUEST}/n/default",
                          "default changed from 1 to 2"),
    "a nested request field removed": (lambda s: request(s)["options"]["properties"].pop("verbose"),
                                       "request-field-removed", f"{REQUEST}/options/properties/verbose",
                                       "`options.verbose` removed"),
    "items tightened": (lambda s: request(s)["tags"]["items"].update(maxLength=5), "maxLength-tightened",
                        f"{REQUEST}/tags/items/maxLength", "request field `tags[]`: maxLength lowered"),
    "items made unique": (lambda s: request(s)["tags"].update(uniqueItems=True), "unique-items-changed",
                          f"{REQUEST}/tags/uniqueItems", "items must now be unique"),
    "an allOf constraint added": (lambda s: schemas(s)["Request"].update(allOf=[{"required": ["effort"]}]),
                                  "constraint-added", "#/components/schemas/Request/allOf/0", "allOf constraint"),
    "a conditional added": (lambda s: schemas(s)["Request"].update({"if": {"required": ["n"]},
                                                                    "then": {"required": ["effort"]}}),
                            "if-changed", "#/components/schemas/Request/if", "cannot tell a loosening"),
    "a response field removed": (lambda s: schemas(s)["Choice"]["properties"].pop("index"), "response-field-removed",
                                 "#/components/schemas/Choice/properties/index",
                                 "response field `choices[].index` removed"),
    "a response field made optional": (lambda s: schemas(s)["Answer"]["required"].remove("id"),
                                       "response-field-optional", f"{ANSWER}/id", "response field `id` made optional"),
    "a response enum widened": (lambda s: schemas(s)["Status"]["enum"].append("queued"), "enum-widened",
                                "#/components/schemas/Status/enum",
                                'response field `status`: enum widened: "queued" added'),
    "a response field made nullable": (lambda s: answer(s)["score"].update(type=["number", "null"]), "nullable-added",
                                       f"{ANSWER}/score", "response field `score`: may now be null"),
    "a response field made nullable with anyOf": (
        lambda s: answer(s).update(status={"anyOf": [{"$ref": "#/components/schemas/Status"}, {"type": "null"}]}),
        "nullable-added", f"{ANSWER}/status", "may now be null"),
    "a response type widened": (lambda s: schemas(s)["Choice"]["properties"]["index"].update(type="number"),
                                "type-changed", "#/components/schemas/Choice/properties/index/type",
                                "type changed from integer to number"),
    "a response maximum raised": (lambda s: answer(s)["score"].update(maximum=2), "maximum-loosened",
                                  f"{ANSWER}/score/maximum", "maximum raised from 1 to 2"),
    "a response pattern removed": (lambda s: answer(s)["code"].pop("pattern"), "pattern-removed",
                                   f"{ANSWER}/code/pattern", "pattern '^[A-Z]{3}$' removed"),
    "a response pattern loosened": (lambda s: answer(s)["code"].update(pattern="^[A-Z]{3,4}$"), "pattern-loosened",
                                    f"{ANSWER}/code/pattern", "which lets"),
    "a response alternative added": (lambda s: answer(s).update(id={"anyOf": [{"type": "string"},
                                                                              {"type": "integer"}]}),
                                     "alternative-added", f"{ANSWER}/id/anyOf/1", "alternative of type integer added"),
    "a response map's values unconstrained": (lambda s: answer(s)["extra"].update(additionalProperties=True),
                                              "additional-properties-changed", f"{ANSWER}/extra/additionalProperties",
                                              "no longer constrained"),
}

@pytest.mark.parametrize("name", BREAKING)
def test_a_breaking_edit_is_refused_by_name_and_place(name):
    edit, kind, where, words = BREAKING[name]
    changes = compare_documents(small_spec(), edited(edit))
    hits = [change for change in changes if change.kind == kind and change.where == where]
    assert hits, "\n".join(change.line() for change in changes)
    assert hits[0].level == Level.BREAKING and words in hits[0].message, hits[0].line()


def test_a_request_number_narrowed_to_integer_is_breaking():
    base = edited(lambda s: request(s).update(ratio={"type": "number"}))
    changes = compare_documents(base, edited(lambda s: request(s)["ratio"].update(type="integer"), spec=base))
    assert [(c.level, c.kind, c.where) for c in changes] == [(Level.BREAKING, "type-changed", f"{REQUEST}/ratio/type")]


# Loosened requests, narrowed responses, additions: a client built on the old contract keeps working.
ADDITIVE = {
    "a new optional request field": (lambda s: request(s).update(seed={"type": "integer"}), "request-field-added"),
    "a request enum widened": (lambda s: request(s)["effort"]["enum"].append("medium"), "enum-widened"),
    "a request maximum raised": (lambda s: request(s)["n"].update(maximum=16), "maximum-loosened"),
    "a request pattern loosened": (lambda s: request(s)["model"].update(pattern="^[a-z0-9]+/.+$"), "pattern-loosened"),
    "additionalProperties opened": (lambda s: schemas(s)["Request"].update(additionalProperties=True),
                                    "additional-properties-changed"),
    "a request alternative added": (lambda s: request(s)["stop"]["anyOf"].insert(0, {"type": "integer"}),
                                    "alternative-added"),
    "a request integer widened to number": (lambda s: request(s)["n"].update(type=["number", "null"]), "type-changed"),
    "a request field made nullable": (lambda s: request(s)["effort"].update(type=["string", "null"]), "nullable-added"),
    "a request field made optional": (lambda s: schemas(s)["Request"]["required"].remove("model"),
                                      "request-field-optional"),
    "a new response field": (lambda s: answer(s).update(created={"type": "integer"}), "response-field-added"),
    "a response enum narrowed": (lambda s: schemas(s)["Status"]["enum"].remove("failed"), "enum-narrowed"),
    "a response number narrowed to integer": (lambda s: answer(s)["score"].update(type="integer"), "type-changed"),
    "a response maximum lowered": (lambda s: answer(s)["score"].update(maximum=0.5), "maximum-tightened"),
    "a response field made required": (lambda s: schemas(s)["Answer"]["required"].append("score"),
                                       "response-field-required"),
}


@pytest.mark.parametrize("name", ADDITIVE)
def test_an_additive_edit_is_named_and_not_breaking(name):
    edit, kind = ADDITIVE[name]
    changes = compare_documents(small_spec(), edited(edit))
    assert [change.kind for change in changes if change.level == Level.BREAKING] == [], changes
    assert kind in {change.kind for change in changes if change.level == Level.ADDITIVE}, changes


# The same contract spelled otherwise: no change at all.
SAME = {
    "null as an alternative instead of a type": lambda s: request(s).update(n={
        "anyOf": [{"type": "integer", "minimum": 1, "maximum": 8}, {"type": "null"}], "default": 1}),
    "a component inlined": lambda s: answer(s)["choices"].update(items=schemas(s)["Choice"]),
    "a path parameter renamed": lambda s: s["paths"].update({"/things/{id}": _renamed(s["paths"].pop(PATH))}),
    "a header parameter's case": lambda s: s["paths"][PATH]["post"]["parameters"][2].update(name="X-Trace"),
    "descriptions": lambda s: schemas(s)["Request"].update(description="What a client sends.", title="Request"),
}


def _renamed(item: dict) -> dict:
    item["post"]["parameters"][0]["name"] = "id"
    return item


@pytest.mark.parametrize("name", SAME)
def test_the_same_contract_spelled_otherwise_is_no_change(name):
    assert compare_documents(small_spec(), edited(SAME[name])) == []


def test_a_schema_that_refers_to_itself_is_compared_in_both_directions_and_ends():
    changes = compare_documents(small_spec(), edited(
        lambda s: schemas(s)["Tree"]["properties"]["name"].update(type="integer")))
    said = {change.message for change in changes if change.kind == "type-changed"}
    assert said == {"request field `tree.name`: type changed from string to integer",
                    "response field `tree.name`: type changed from string to integer"}


def test_a_change_to_a_shared_schema_names_every_operation_it_is_seen_from():
    changes = compare_documents(small_spec(), edited(lambda s: schemas(s)["Status"]["enum"].append("queued")))
    assert set(changes[0].reached_from) == {"POST /things/{thing_id} response 200 application/json",
                                            "GET /things/{thing_id} response 200 application/json"}


def _pets(spec):
    schemas(spec).update(Cat={"type": "object", "required": ["kind"], "properties": {"kind": {"const": "cat"}}},
                         Dog={"type": "object", "required": ["kind"], "properties": {"kind": {"const": "dog"}}})
    pet = {"oneOf": [{"$ref": "#/components/schemas/Cat"}, {"$ref": "#/components/schemas/Dog"}],
           "discriminator": {"propertyName": "kind", "mapping": {"cat": "#/components/schemas/Cat",
                                                                 "dog": "#/components/schemas/Dog"}}}
    request(spec)["pet"] = copy.deepcopy(pet)
    answer(spec)["pet"] = pet


def test_a_discriminator_value_removed_breaks_requests_and_one_added_breaks_responses():
    base = edited(_pets)

    def without_dog(spec):
        for side in (request(spec), answer(spec)):
            side["pet"]["oneOf"].pop()
            side["pet"]["discriminator"]["mapping"].pop("dog")

    changes = compare_documents(base, edited(without_dog, spec=base))
    assert {(c.level, c.kind, c.where) for c in changes} == {
        (Level.BREAKING, "discriminator-narrowed", f"{REQUEST}/pet/discriminator"),
        (Level.BREAKING, "alternative-removed", f"{REQUEST}/pet/oneOf/1"),
        (Level.ADDITIVE, "discriminator-narrowed", f"{ANSWER}/pet/discriminator"),
        (Level.ADDITIVE, "alternative-removed", f"{ANSWER}/pet/oneOf/1")}
    added = compare_documents(edited(without_dog, spec=base), base)
    assert {(c.level, c.kind) for c in added if c.where.startswith(ANSWER)} == {
        (Level.BREAKING, "discriminator-widened"), (Level.BREAKING, "alternative-added")}
