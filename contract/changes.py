"""What a change to the contract is, and the document-wide comparison behind the version rule.

A change has a level: `DOC` (descriptions and the like: a patch), `ADDITIVE` (a client built on the
old contract keeps working: a minor version) or `BREAKING` (such a client may fail: a major
version). `where` is a JSON pointer (RFC 6901) into the document that has the thing: the new one,
or the old one for what was removed."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any


class Level(enum.IntEnum):
    NONE = 0
    DOC = 1
    ADDITIVE = 2
    BREAKING = 3

    @property
    def bump(self) -> str:
        return {Level.NONE: "none", Level.DOC: "patch", Level.ADDITIVE: "minor", Level.BREAKING: "major"}[self]


@dataclasses.dataclass(frozen=True)
class Change:
    level: Level
    kind: str  # a short code, one per rule (docs/contract.md lists them)
    where: str
    message: str
    subject: str  # what the changelog must name for it: "GET /v5/models" or a field's name
    named: bool = False  # an operation, parameter or field added or removed: the changelog names it
    reached_from: tuple[str, ...] = ()  # the operations (and which part) a schema's change is seen from

    def line(self) -> str:
        label = {Level.BREAKING: "breaking", Level.ADDITIVE: "additive", Level.DOC: "doc"}.get(self.level, "")
        seen = ""
        if self.reached_from:
            more = len(self.reached_from) - 1
            seen = f" [{self.reached_from[0]}{f', and {more} more' if more else ''}]"
        return f"{label:8}  {self.where}: {self.message}{seen}"


def pointer(*parts: str | int) -> str:
    """`#/a/b` from parts, each escaped as RFC 6901 says ("/" is "~1")."""
    return "#" + "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def child(base: str, *parts: str | int) -> str:
    return base + pointer(*parts)[1:]


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# Keywords that only document: changing them is a patch. Stripped wherever they are keywords, never
# where they are names (a property called `title` is a field).
DOC_KEYWORDS = frozenset({"description", "summary", "title", "example", "examples", "externalDocs", "$comment",
                          "contact", "license", "termsOfService"})
# Objects whose keys are names chosen by the author, not keywords.
NAME_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "schemas",
                       "paths", "responses", "content", "headers", "securitySchemes", "parameters",
                       "requestBodies", "links", "callbacks", "encoding", "variables", "mapping", "webhooks",
                       "pathItems"})


def without_docs(node: Any, names: bool = False) -> Any:
    """`node` without its documentation keywords (the contract as a client's code sees it)."""
    if isinstance(node, dict):
        return {key: without_docs(value, key in NAME_MAPS and not names)
                for key, value in node.items() if names or key not in DOC_KEYWORDS}
    if isinstance(node, list):
        return [without_docs(item) for item in node]
    return node


def differences(old: Any, new: Any, at: str = "#") -> list[tuple[str, str]]:
    """Where two documents differ: the highest pointer of each difference (a list that changed is
    named whole), each with "added", "removed" or "changed"."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in [*old, *(key for key in new if key not in old)]:
            here = child(at, key)
            if key not in new:
                found.append((here, "removed"))
            elif key not in old:
                found.append((here, "added"))
            else:
                found += differences(old[key], new[key], here)
        return found
    return [] if canonical(old) == canonical(new) else [(at, "changed")]
