"""Schemas as the comparison reads them: a node is a schema and where it is; a view is a node with
its `$ref`s followed and its null alternatives folded in (`anyOf: [X, {"type": "null"}]` is a nullable
X, the same as `type: [..., "null"]`), so that both spellings compare equal."""

from __future__ import annotations

import dataclasses
from typing import Any

from contract.changes import canonical, child


@dataclasses.dataclass(frozen=True)
class Node:
    schema: Any
    where: str


@dataclasses.dataclass
class View:
    """A schema with its `$ref`s followed and its null alternatives folded into `nullable`."""
    schema: dict
    where: str  # where its keywords are: the end of its `$ref`s
    nullable: bool
    branches: list[Node]  # anyOf and oneOf alternatives other than null
    origin: str = ""  # where the schema was met, before its `$ref`s: a field's own place

    @property
    def types(self) -> frozenset[str] | None:
        stated = self.schema.get("type")
        if stated is None:
            return None
        return frozenset(stated if isinstance(stated, list) else [stated]) - {"null"}

    @property
    def takes_null(self) -> bool:
        return self.nullable or (self.types is None and not self.branches and "enum" not in self.schema
                                 and "const" not in self.schema)

    @property
    def values(self) -> set[str] | None:
        if "const" in self.schema:
            return {canonical(self.schema["const"])}
        if isinstance(self.schema.get("enum"), list):
            return {canonical(value) for value in self.schema["enum"]}
        return None


def resolve(document: dict, node: Node) -> Node:
    """`node` with its `$ref` chain followed (siblings of a `$ref` kept over the target's keywords)."""
    schema, where, seen = node.schema, node.where, set()
    if schema is True:
        schema = {}
    elif schema is False:
        schema = {"not": {}}
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#"):
        ref = schema["$ref"]
        if ref in seen:
            break
        seen.add(ref)
        target: Any = document
        for part in ref[2:].split("/") if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, dict) else None
        if not isinstance(target, dict):
            break  # a dangling reference: compared as written
        siblings = {key: value for key, value in schema.items() if key != "$ref"}
        schema, where = {**target, **siblings}, ref
    return Node(schema if isinstance(schema, dict) else {}, where)


def _is_null(document: dict, node: Node) -> bool:
    schema = resolve(document, node).schema
    return schema.get("type") == "null" or schema.get("type") == ["null"]


def view(document: dict, node: Node) -> View:
    resolved = resolve(document, node)
    schema, where, nullable = dict(resolved.schema), resolved.where, False
    branches: list[Node] = []
    for keyword in ("anyOf", "oneOf"):
        listed = schema.pop(keyword, None)
        if not isinstance(listed, list):
            continue
        for index, branch in enumerate(listed):
            branch_node = Node(branch, child(where, keyword, index))
            if _is_null(document, branch_node):
                nullable = True
            else:
                branches.append(branch_node)
    if nullable and len(branches) == 1:  # `anyOf: [X, null]` is X, nullable
        lifted = view(document, branches[0])
        return View({**schema, **lifted.schema}, lifted.where, True, lifted.branches, node.where)
    return View(schema, where, nullable or "null" in _listed(schema.get("type")), branches, node.where)


def _listed(value: Any) -> list:
    return value if isinstance(value, list) else [] if value is None else [value]
