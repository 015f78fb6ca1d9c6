"""The rules for what a schema holds: an object's fields and its other properties, an array's
items, the alternatives of a choice (`anyOf`, `oneOf`), the constraints of an `allOf`, and a
discriminator's mapping. Each recurses into the walk for the schemas inside."""

from __future__ import annotations

from typing import Any

from contract.changes import Level, canonical, child
from contract.keywords import Pair
from contract.nodes import Node, view


def properties(pair: Pair) -> None:
    old, new = pair.old, pair.new
    before, after = _mapping(old.schema.get("properties")), _mapping(new.schema.get("properties"))
    required_before, required_after = set(old.schema.get("required") or ()), set(new.schema.get("required") or ())
    side, record = pair.direction, pair.walk.record
    for name in before:
        if name not in after:
            record(Level.BREAKING, f"{side}-field-removed", child(old.where, "properties", name),
                   f"{side} field `{_dotted(pair, name)}` removed", name, named=True)
    for name, schema in after.items():
        where, field = child(new.where, "properties", name), _dotted(pair, name)
        label = f"{side} field `{field}`"
        if name not in before:
            if pair.request and name in required_after:
                record(Level.BREAKING, "request-field-required", where, f"new required {label}", name, named=True)
            else:
                record(Level.ADDITIVE, f"{side}-field-added", where, f"{label} added", name, named=True)
            continue
        if name in required_after and name not in required_before:
            record(Level.BREAKING if pair.request else Level.ADDITIVE, f"{side}-field-required", where,
                   f"{label} made required", name)
        elif name in required_before and name not in required_after:
            record(Level.ADDITIVE if pair.request else Level.BREAKING, f"{side}-field-optional", where,
                   f"{label} made optional", name)
        pair.walk.compare(Node(before[name], child(old.where, "properties", name)), Node(schema, where), side, label,
                          name, field)
    if pair.request:  # required names without a schema of their own
        for name in sorted(required_after - required_before - set(after)):
            record(Level.BREAKING, "request-field-required", child(new.where, "required"),
                   f"request field `{_dotted(pair, name)}` made required", name)


def additional_properties(pair: Pair) -> None:
    before, after = _extra(pair.old.schema), _extra(pair.new.schema)
    if canonical(before) != canonical(after):
        where = child(pair.new.where, "additionalProperties")
        if isinstance(before, dict) and isinstance(after, dict):
            pair.walk.compare(Node(before, child(pair.old.where, "additionalProperties")), Node(after, where),
                              pair.direction, _inner(pair, "*", "its other fields"), pair.subject, f"{pair.field}.*")
        elif pair.request:
            tightened = after is False or before is True
            said = "fields it does not name are now refused" if after is False else (
                "fields it does not name are now constrained" if tightened else "fields it does not name are now taken")
            pair.walk.record(Level.BREAKING if tightened else Level.ADDITIVE, "additional-properties-changed", where,
                             f"{pair.label}: {said}", pair.subject)
        else:  # an object may gain fields in a response; a map's values may not grow
            widened = isinstance(before, dict) and after is True
            pair.walk.record(Level.BREAKING if widened else Level.ADDITIVE, "additional-properties-changed", where,
                             f"{pair.label}: "
                             + ("the values of fields it does not name are no longer constrained" if widened
                                else "fields it does not name changed"), pair.subject)
    if "propertyNames" in pair.old.schema or "propertyNames" in pair.new.schema:
        pair.walk.compare(Node(pair.old.schema.get("propertyNames", {}), child(pair.old.where, "propertyNames")),
                          Node(pair.new.schema.get("propertyNames", {}), child(pair.new.where, "propertyNames")),
                          pair.direction, f"{pair.label} (its field names)", pair.subject, pair.field)


def items(pair: Pair) -> None:
    if "items" in pair.old.schema or "items" in pair.new.schema:
        pair.walk.compare(Node(pair.old.schema.get("items", {}), child(pair.old.where, "items")),
                          Node(pair.new.schema.get("items", {}), child(pair.new.where, "items")),
                          pair.direction, _inner(pair, "[]", "its items"), pair.subject, f"{pair.field}[]")
    before, after = bool(pair.old.schema.get("uniqueItems")), bool(pair.new.schema.get("uniqueItems"))
    if before != after:
        pair.report(after, "unique-items-changed", "items must now be unique" if after else "items may now repeat",
                    child(pair.new.where, "uniqueItems"))


def alternatives(pair: Pair) -> None:
    """A choice's alternatives (`anyOf` and `oneOf` alike), matched by `$ref`, then by shape. A
    single schema facing a choice is a choice of one."""
    olds = pair.old.branches or [Node(pair.old.schema, pair.old.where)]
    news = pair.new.branches or [Node(pair.new.schema, pair.new.where)]
    if not (pair.old.branches or pair.new.branches):
        return
    matched, removed, added = _match(pair, olds, news)
    for old, new in matched:
        pair.walk.compare(old, new, pair.direction, pair.label, pair.subject, pair.field, alternative=True)
    for old in removed:
        pair.report(True, "alternative-removed", f"alternative {_described(pair.walk.old_document, old)} removed",
                    old.where)
    for new in added:
        pair.report(False, "alternative-added", f"alternative {_described(pair.walk.new_document, new)} added",
                    new.where)


def all_of(pair: Pair) -> None:
    olds = [Node(s, child(pair.old.where, "allOf", i)) for i, s in enumerate(pair.old.schema.get("allOf") or ())]
    news = [Node(s, child(pair.new.where, "allOf", i)) for i, s in enumerate(pair.new.schema.get("allOf") or ())]
    matched, removed, added = _match(pair, olds, news)
    for old, new in matched:
        pair.walk.compare(old, new, pair.direction, pair.label, pair.subject, pair.field)
    for old in removed:  # a constraint fewer: looser
        pair.report(False, "constraint-removed", f"allOf constraint {_described(pair.walk.old_document, old)} removed",
                    old.where)
    for new in added:
        pair.report(True, "constraint-added", f"allOf constraint {_described(pair.walk.new_document, new)} added",
                    new.where)


def discriminator(pair: Pair) -> None:
    before, after = pair.old.schema.get("discriminator") or {}, pair.new.schema.get("discriminator") or {}
    if canonical(before) == canonical(after):
        return
    where = child(pair.new.where, "discriminator")
    if before.get("propertyName") != after.get("propertyName"):
        pair.breaking("discriminator-changed", f"discriminator changed from {before.get('propertyName')!r} to "
                      f"{after.get('propertyName')!r}", where)
    old_map, new_map = before.get("mapping") or {}, after.get("mapping") or {}
    removed, added = sorted(set(old_map) - set(new_map)), sorted(set(new_map) - set(old_map))
    if removed:
        pair.report(True, "discriminator-narrowed", f"discriminator values {', '.join(removed)} removed", where)
    if added:
        pair.report(False, "discriminator-widened", f"discriminator values {', '.join(added)} added", where)
    for value in sorted(set(old_map) & set(new_map)):
        if old_map[value] != new_map[value]:
            pair.breaking("discriminator-changed", f"discriminator value {value!r} now means {new_map[value]}", where)


def _match(pair: Pair, olds: list[Node], news: list[Node]) -> tuple[list[tuple[Node, Node]], list[Node], list[Node]]:
    """Pairs of the same `$ref`, then of the same types and required fields, then of the same types;
    what is left on each side was removed or added."""
    free, matched, left = list(news), [], list(olds)
    shapes = [lambda node, doc: _ref(node),
              lambda node, doc: (view(doc, node).types, tuple(sorted(view(doc, node).schema.get("required") or ()))),
              lambda node, doc: view(doc, node).types]
    for shape in shapes:
        unmatched = []
        for old in left:
            key = shape(old, pair.walk.old_document)
            hit = next((new for new in free if key is not None and shape(new, pair.walk.new_document) == key), None)
            if hit is None:
                unmatched.append(old)
            else:
                free.remove(hit)
                matched.append((old, hit))
        left = unmatched
    return matched, left, free


def _ref(node: Node) -> str | None:
    return node.schema.get("$ref") if isinstance(node.schema, dict) else None


def _described(document: dict, node: Node) -> str:
    ref = _ref(node)
    if ref:
        return ref.rsplit("/", 1)[-1]
    types = view(document, node).types
    return f"of type {', '.join(sorted(types))}" if types else node.where


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _extra(schema: dict) -> Any:
    value = schema.get("additionalProperties", True)
    return True if value == {} else value


def _dotted(pair: Pair, name: str) -> str:
    return f"{pair.field}.{name}" if pair.field else name


def _inner(pair: Pair, suffix: str, said: str) -> str:
    """The label of what a field holds: `choices[]`, `logit_bias.*`; or the container's, said."""
    if pair.field:
        return f"{pair.direction} field `{pair.field}{'.' if suffix == '*' else ''}{suffix}`"
    return f"{pair.label} ({said})"
