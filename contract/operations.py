"""Two OpenAPI documents compared operation by operation: what was removed, renamed or added, and
each operation's parameters, request body and responses (status, media type, headers, schemas),
with the schemas compared in the direction they travel (contract/schemas.py)."""

from __future__ import annotations

import re
from typing import Any

from contract.changes import Change, Level, canonical, child, pointer, without_docs
from contract.nodes import Node, resolve
from contract.schemas import REQUEST, RESPONSE, SchemaComparison

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
TEMPLATE = re.compile(r"\{([^}/]+)\}")


class Recorder:
    """Collects changes once each, with every operation part they were seen from."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str, str], Change] = {}
        self.context = ""

    def __call__(self, level: Level, kind: str, where: str, message: str, subject: str, named: bool = False) -> None:
        key = (kind, where, message)
        seen = self._found[key].reached_from if key in self._found else ()
        if self.context and self.context not in seen:
            seen = (*seen, self.context)
        self._found[key] = Change(level, kind, where, message, subject, named, seen)

    def changes(self) -> list[Change]:
        return sorted(self._found.values(), key=lambda change: (-change.level, change.where, change.kind))


def compare_documents(old: dict, new: dict) -> list[Change]:
    record = Recorder()  # its context stays empty for what concerns operations whole
    before, after = _operations(old), _operations(new)
    for key, (path, method, _) in before.items():
        if key not in after:
            label = f"{method.upper()} {path}"
            record(Level.BREAKING, "operation-removed", pointer("paths", path, method), f"operation {label} removed",
                   label, named=True)
    for key, (path, method, _) in after.items():
        if key not in before:
            label = f"{method.upper()} {path}"
            record(Level.ADDITIVE, "operation-added", pointer("paths", path, method), f"operation {label} added",
                   label, named=True)
        else:
            _Operation(old, new, record, before[key], after[key]).compare()
            record.context = ""
    _security_schemes(old, new, record)
    return record.changes()


def _operations(document: dict) -> dict[tuple[str, str], tuple[str, str, dict]]:
    """(method, path with its parameters unnamed) -> (path, method, operation): a path parameter's
    name is not part of the URL a client calls."""
    found = {}
    for path, item in (document.get("paths") or {}).items():
        for method in METHODS:
            if isinstance(item, dict) and isinstance(item.get(method), dict):
                found[(method, TEMPLATE.sub("{}", path))] = (path, method, item[method])
    return found


class _Operation:
    def __init__(self, old_document: dict, new_document: dict, record: Recorder,
                 old: tuple[str, str, dict], new: tuple[str, str, dict]) -> None:
        self.documents, self.record = (old_document, new_document), record
        (self.old_path, _, self.old), (self.path, self.method, self.new) = old, new
        self.label = f"{self.method.upper()} {self.path}"
        self.where = pointer("paths", self.path, self.method)
        self.schemas = SchemaComparison(old_document, new_document, record)

    def note(self, level: Level, kind: str, where: str, message: str, subject: str, named: bool = False) -> None:
        """A change of the operation itself (not of a schema it shares): named with the operation."""
        self.record.context = ""
        self.record(level, kind, where, f"{self.label}: {message}", subject, named)

    def part(self, context: str) -> None:
        """What the schema comparisons that follow are seen from."""
        self.record.context = f"{self.label} {context}"

    def compare(self) -> None:
        if self.old.get("operationId") != self.new.get("operationId"):
            self.note(Level.BREAKING, "operation-id-changed", child(self.where, "operationId"),
                      f"operationId changed from {self.old.get('operationId')!r} to {self.new.get('operationId')!r} "
                      "(generated clients name their methods after it)", self.label)
        self.security()
        self.parameters()
        self.request_body()
        self.responses()

    def security(self) -> None:
        before, after = (_security(document, operation)
                         for document, operation in zip(self.documents, (self.old, self.new), strict=True))
        for text, requirement in sorted(before.items()):
            if text in after or canonical({}) in after:  # kept, or anyone is served now
                continue
            # the same schemes with other scopes: a key that had the old scopes only is refused
            same = [other for key, other in sorted(after.items())
                    if key not in before and set(other) == set(requirement)]
            said = (f"now needs {_shown(same[0])} where it needed {_shown(requirement)}" if same
                    else f"no longer accepts {_shown(requirement)}")
            self.note(Level.BREAKING, "security-changed", child(self.where, "security"), said, self.label)
        for text, requirement in sorted(after.items()):
            if text not in before and not any(set(other) == set(requirement) for key, other in before.items()
                                               if key not in after):
                self.note(Level.ADDITIVE, "security-added", child(self.where, "security"),
                          f"also accepts {_shown(requirement)}", self.label)

    def parameters(self) -> None:
        before = _parameters(self.documents[0], self.old_path, self.method, self.old)
        after = _parameters(self.documents[1], self.path, self.method, self.new)
        for key, old in before.items():
            if key not in after:
                name = old.schema.get("name")
                self.note(Level.BREAKING, "parameter-removed", old.where, f"{old.schema.get('in')} parameter `{name}` "
                          "removed", name, named=True)
        for key, new in after.items():
            name, place, required = new.schema.get("name"), new.schema.get("in"), bool(new.schema.get("required"))
            if key not in before:
                self.note(Level.BREAKING if required else Level.ADDITIVE,
                          "parameter-required" if required else "parameter-added", new.where,
                          f"new {'required' if required else 'optional'} {place} parameter `{name}`", name, named=True)
                continue
            old = before[key]
            if required and not old.schema.get("required"):
                self.note(Level.BREAKING, "parameter-required", new.where, f"{place} parameter `{name}` made required",
                          name)
            for keyword in ("style", "explode", "allowReserved"):
                if old.schema.get(keyword) != new.schema.get(keyword):
                    self.note(Level.BREAKING, "parameter-serialization-changed", child(new.where, keyword),
                              f"{place} parameter `{name}`: {keyword} changed", name)
            self.part("parameters")
            self.schemas.compare(Node(old.schema.get("schema", {}), child(old.where, "schema")),
                                 Node(new.schema.get("schema", {}), child(new.where, "schema")),
                                 REQUEST, f"{place} parameter `{name}`", name)

    def request_body(self) -> None:
        old, new = (self._resolved(document, operation.get("requestBody"), child(self.where, "requestBody"))
                    for document, operation in zip(self.documents, (self.old, self.new), strict=True))
        where = child(self.where, "requestBody")
        if old is None or new is None:
            if new is not None:
                required = bool(new.schema.get("required"))
                self.note(Level.BREAKING if required else Level.ADDITIVE, "request-body-added", where,
                          f"{'a required' if required else 'an optional'} request body added", self.label)
            elif old is not None:
                self.note(Level.BREAKING, "request-body-removed", where, "request body removed", self.label)
            return
        if new.schema.get("required") and not old.schema.get("required"):
            self.note(Level.BREAKING, "request-body-required", where, "request body made required", self.label)
        self.content(old, new, REQUEST, "request body")

    def responses(self) -> None:
        before, after = self.old.get("responses") or {}, self.new.get("responses") or {}
        for status in before:
            if status not in after:
                self.note(Level.BREAKING, "response-removed", child(self.where, "responses", status),
                          f"response {status} removed", self.label)
        for status in after:
            where = child(self.where, "responses", status)
            if status not in before:
                self.note(Level.ADDITIVE, "response-added", where, f"response {status} added", self.label)
                continue
            old = resolve(self.documents[0], Node(before[status], child(self.where, "responses", status)))
            new = resolve(self.documents[1], Node(after[status], where))
            self.content(old, new, RESPONSE, f"response {status}")
            self.headers(old, new, status)

    def content(self, old: Node, new: Node, direction: str, part: str) -> None:
        before, after = old.schema.get("content") or {}, new.schema.get("content") or {}
        for media in before:
            if media not in after:
                self.note(Level.BREAKING, f"{direction}-media-type-removed", child(old.where, "content", media),
                          f"{part}: media type {media} removed", self.label)
        for media, body in after.items():
            if media not in before:
                self.note(Level.ADDITIVE, f"{direction}-media-type-added", child(new.where, "content", media),
                          f"{part}: media type {media} added", self.label)
                continue
            self.part(f"{part} {media}")
            self.schemas.compare(Node((before[media] or {}).get("schema", {}),
                                      child(old.where, "content", media, "schema")),
                                 Node((body or {}).get("schema", {}), child(new.where, "content", media, "schema")),
                                 direction, f"{direction} body", self.label)

    def headers(self, old: Node, new: Node, status: str) -> None:
        before, after = _headers(self.documents[0], old), _headers(self.documents[1], new)
        for name, (where, _) in before.items():
            if name not in after:
                self.note(Level.BREAKING, "response-header-removed", where,
                          f"response {status}: header `{name}` removed", name, named=True)
        for name, (where, header) in after.items():
            if name not in before:
                self.note(Level.ADDITIVE, "response-header-added", where, f"response {status}: header `{name}` added",
                          name, named=True)
                continue
            old_header = before[name][1]
            if old_header.schema.get("required") and not header.schema.get("required"):
                self.note(Level.BREAKING, "response-header-optional", where,
                          f"response {status}: header `{name}` made optional", name)
            self.part(f"response {status}")
            self.schemas.compare(Node(old_header.schema.get("schema", {}), child(old_header.where, "schema")),
                                 Node(header.schema.get("schema", {}), child(header.where, "schema")),
                                 RESPONSE, f"response header `{name}`", name)

    @staticmethod
    def _resolved(document: dict, value: Any, where: str) -> Node | None:
        return None if value is None else resolve(document, Node(value, where))


def _headers(document: dict, response: Node) -> dict[str, tuple[str, Node]]:
    """A response's headers by their name in lower case: where each is listed, and what it is."""
    found = {}
    for name, header in (response.schema.get("headers") or {}).items():
        where = child(response.where, "headers", name)
        found[name.lower()] = (where, resolve(document, Node(header, where)))
    return found


def _parameters(document: dict, path: str, method: str, operation: dict) -> dict[tuple[str, Any], Node]:
    """The operation's parameters with its path's, by where they go and their name (a header's in
    lower case; a path parameter by its place in the path, its name being the author's)."""
    placed = TEMPLATE.findall(path)
    item = (document.get("paths") or {}).get(path) or {}
    found: dict[tuple[str, Any], Node] = {}
    for where, listed in ((pointer("paths", path, "parameters"), item.get("parameters")),
                          (pointer("paths", path, method, "parameters"), operation.get("parameters"))):
        for index, parameter in enumerate(listed or ()):
            node = resolve(document, Node(parameter, child(where, index)))
            name, place = node.schema.get("name"), node.schema.get("in")
            if place == "path" and name in placed:
                found[("path", placed.index(name))] = node
            else:
                found[(place, name.lower() if place == "header" and isinstance(name, str) else name)] = node
    return found


def _security(document: dict, operation: dict) -> dict[str, dict[str, list[str]]]:
    """The ways a client may authenticate, by their text; no requirement at all is anonymous."""
    requirements = operation.get("security", document.get("security")) or [{}]
    found = {}
    for requirement in requirements:
        scoped = {scheme: sorted(scopes or ()) for scheme, scopes in (requirement or {}).items()}
        found[canonical(scoped)] = scoped
    return found


def _shown(requirement: dict[str, list[str]]) -> str:
    if not requirement:
        return "anyone (no credentials)"
    return " and ".join(f"{scheme} " + (f"with scope {', '.join(scopes)}" if scopes else "without a scope")
                        for scheme, scopes in sorted(requirement.items()))


def _security_schemes(old: dict, new: dict, record: Recorder) -> None:
    record.context = ""
    before = (old.get("components") or {}).get("securitySchemes") or {}
    after = (new.get("components") or {}).get("securitySchemes") or {}
    for name, scheme in before.items():
        where = pointer("components", "securitySchemes", name)
        if name not in after:
            record(Level.BREAKING, "security-scheme-removed", where, f"security scheme {name} removed", name)
        elif canonical(without_docs(scheme)) != canonical(without_docs(after[name])):
            record(Level.BREAKING, "security-scheme-changed", where, f"security scheme {name} changed", name)
    for name in after:
        if name not in before:
            record(Level.ADDITIVE, "security-scheme-added", pointer("components", "securitySchemes", name),
                   f"security scheme {name} added", name)
