"""The JSON Schemas a client sends (a chat request's tool and function `parameters`, its
`response_format.json_schema.schema`), checked and compiled against nothing outside themselves.

A JSON Schema can name other documents: `$schema` its meta-schema, `$ref`, `$dynamicRef` and
`$recursiveRef` other schemas, resolved against the base an `$id` sets. jsonschema-rs fetches what
they name, over HTTP or from the file system, while the event loop waits: a client would have the
gateway fetch any address it can reach, and learn from the answer what it found there. So here:

- every `$schema`, wherever it stands, names a draft jsonschema-rs carries (`DRAFTS`), by name;
- every reference is local (`#...`): the checks name where one is not, as a 422;
- jsonschema-rs is given a registry and a retriever that refuse every address, so that a way of
  naming a document these checks do not see still fetches nothing (an error, not a request);
- a request's schemas are bounded together (`MAX_BYTES`, `MAX_DEPTH`, `MAX_OBJECTS`), and a schema
  the gateway compiles to check answers against (a strict `json_schema`) also in its patterns
  (`MAX_PATTERNS`, `REGEX_SIZE`). The checks run on the event loop (jsonschema-rs holds the GIL
  while it checks and compiles, so a thread would not free the loop): the bounds keep the worst of
  them to what reading the largest body the gateway takes costs already (docs/performance.md,
  "A client's JSON Schemas").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NoReturn

import jsonschema_rs
import orjson

from gateway.core.errors import ValidationFailed, clip

Location = tuple[str | int, ...]
Problem = tuple[Location, str]
Checked = tuple[Location, Any, bool]  # where a schema stands, the schema, whether the gateway compiles it

# The meta-schemas jsonschema-rs carries, by their identifiers; it knows each without a fetch
# with or without its empty fragment, and fetches every other name (https for draft 7, say).
DRAFTS = (
    "http://json-schema.org/draft-04/schema#",
    "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-07/schema#",
    "https://json-schema.org/draft/2019-09/schema",
    "https://json-schema.org/draft/2020-12/schema",
)
_KNOWN = frozenset(name for draft in DRAFTS for name in (draft.rstrip("#"), draft.rstrip("#") + "#"))
REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
_NAMING = frozenset({"$schema", *REFERENCES})
_WATCHED = _NAMING | {"pattern"}
_CONTAINERS = (dict, list)

MAX_BYTES = 256 << 10  # a request's schemas together, as compact JSON
MAX_DEPTH = 24  # levels of nesting within one schema (its root object is the first)
MAX_OBJECTS = 5000  # JSON objects (schemas and what holds them) in a request's schemas together
MAX_PATTERNS = 8  # `pattern`s and `patternProperties` in a schema the gateway compiles
REGEX_SIZE = 256 << 10  # bytes one compiled pattern may take (the regex crate's size limit)

_PATTERNS = jsonschema_rs.FancyRegexOptions(size_limit=REGEX_SIZE, dfa_size_limit=REGEX_SIZE)


def _refuse(uri: str) -> NoReturn:
    raise LookupError(f"the gateway fetches no schema ({clip(uri)})")


_NOWHERE = jsonschema_rs.Registry([], retriever=_refuse)


def problems(schemas: Iterable[Checked]) -> Iterator[Problem]:
    """The problems of one request's schemas, each (where the schema stands, the schema, whether
    the gateway compiles it to check answers against): at most one a schema, located where it
    stands in the schema; past a bound of the request's, that one and no more."""
    budget = _Budget()
    for loc, schema, compiles in schemas:
        found = budget.spend(loc, schema, compiles) or (None if budget.spent else _meta_problem(loc, schema))
        if found is not None:
            yield found
        if budget.spent:
            return


def compiled(schema: Any, where: Location) -> jsonschema_rs.Validator:
    """A validator of `schema` (a client's, that `problems` found none in), standing at `where` in
    the request: a 422 naming where it cannot be compiled (a pattern, a local reference to nothing).
    It fetches nothing: what it names outside itself is an error."""
    try:
        return jsonschema_rs.validator_for(schema, retriever=_refuse, pattern_options=_PATTERNS)
    except jsonschema_rs.ValidationError as exc:
        why = f"a JSON Schema the gateway cannot check an answer against: {exc.message}"
        if isinstance(exc.kind, jsonschema_rs.ValidationErrorKind.Format):
            why += (f" (a pattern must be a regular expression that compiles within {REGEX_SIZE} bytes: "
                    f"bound a length with minLength and maxLength rather than a repetition)")
        problem = _within(where, exc.instance_path), why
    except jsonschema_rs.ReferencingError as exc:
        problem = where, f"a JSON Schema the gateway cannot check an answer against: {exc.message}"
    raise ValidationFailed([{"loc": list(problem[0]), "msg": problem[1], "type": "value_error"}])


class _Budget:
    """What a request's schemas have used of its bounds so far."""

    __slots__ = ("bytes", "objects", "spent")

    def __init__(self) -> None:
        self.bytes = 0
        self.objects = 0
        self.spent = False  # a bound of the whole request is passed: the rest goes unchecked

    def spend(self, loc: Location, schema: Any, compiles: bool) -> Problem | None:
        """The first problem `schema` has in its size, nesting and names, or None."""
        self.bytes += len(orjson.dumps(schema))
        if self.bytes > MAX_BYTES:
            self.spent = True
            return loc, (f"the request's JSON Schemas come to more than {MAX_BYTES} bytes together "
                         f"(the gateway's bound)")
        named: Problem | None = None
        patterns = 0
        stack: list[tuple[Any, Location]] = [(schema, ())] if isinstance(schema, _CONTAINERS) else []
        while stack:  # containers only, each with its path from the schema's root
            value, path = stack.pop()
            if len(path) >= MAX_DEPTH:
                return _within(loc, path), (f"a JSON Schema nested more than {MAX_DEPTH} levels deep "
                                            f"(the gateway's bound)")
            if isinstance(value, list):
                stack.extend((item, (*path, i)) for i, item in enumerate(value) if isinstance(item, _CONTAINERS))
                continue
            self.objects += 1
            if self.objects > MAX_OBJECTS:
                self.spent = True
                return loc, (f"the request's JSON Schemas hold more than {MAX_OBJECTS} objects together "
                             f"(schemas and subschemas; the gateway's bound)")
            for key, item in value.items():
                if isinstance(item, _CONTAINERS):
                    stack.append((item, (*path, key)))
                    if key == "patternProperties" and isinstance(item, dict):
                        patterns += len(item)
                elif key in _WATCHED and isinstance(item, str):
                    if key == "pattern":
                        patterns += 1
                    elif named is None:
                        named = _named_outside(key, item, _within(loc, path))
        if compiles and patterns > MAX_PATTERNS:
            return loc, (f"a strict JSON Schema with {patterns} patterns, more than the {MAX_PATTERNS} the gateway "
                         f"compiles to check an answer against")
        return named


def _named_outside(key: str, value: str, where: Location) -> Problem | None:
    """The problem of `key: value` in a schema when it names a document outside the schema."""
    if key == "$schema" and value not in _KNOWN:
        return (*where, key), (f"an unknown $schema ({clip(value)}): the gateway takes the drafts it knows, by "
                               f"name, and fetches no other: {', '.join(DRAFTS)}")
    if key in REFERENCES and not value.startswith("#"):
        return (*where, key), (f"a {key} outside the schema ({clip(value)}): only references within it (#...) "
                               f"are allowed")
    return None


def _meta_problem(loc: Location, schema: Any) -> Problem | None:
    try:
        if jsonschema_rs.meta.is_valid(schema, registry=_NOWHERE):  # without building an error, as usual
            return None
        jsonschema_rs.meta.validate(schema, registry=_NOWHERE)
    except jsonschema_rs.ValidationError as exc:
        return _within(loc, exc.instance_path), f"not a valid JSON Schema: {exc.message}"
    except jsonschema_rs.ReferencingError as exc:
        return loc, f"a JSON Schema that names a document outside itself: {exc.message}"
    return loc, "not a valid JSON Schema"


def _within(loc: Location, path: Iterable[str | int]) -> Location:
    """`path` within the schema at `loc`, its names clipped for an error message."""
    return (*loc, *(clip(step) if isinstance(step, str) else step for step in path))
