"""The rules for a schema's own keywords (type, null, enum and const, bounds, pattern, format,
default), each judged in the pair's direction: in a request what the gateway accepts must not shrink,
in a response what a client may get must not grow."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from contract import patterns
from contract.changes import Level, canonical, child, without_docs
from contract.nodes import View

if TYPE_CHECKING:
    from contract.schemas import SchemaComparison

REQUEST, RESPONSE = "request", "response"
# (keyword, True when it bounds from above)
BOUNDS = (("maximum", True), ("exclusiveMaximum", True), ("minimum", False), ("exclusiveMinimum", False),
          ("maxLength", True), ("minLength", False), ("maxItems", True), ("minItems", False),
          ("maxProperties", True), ("minProperties", False))
# Keywords whose changes the check cannot order (tighter or looser): a change to one is breaking.
UNJUDGED = ("if", "then", "else", "not", "dependentSchemas", "dependentRequired", "patternProperties",
            "unevaluatedProperties", "unevaluatedItems", "prefixItems", "contains", "minContains", "maxContains",
            "contentMediaType", "contentEncoding", "contentSchema", "multipleOf")


def _covers(wide: frozenset[str], narrow: frozenset[str]) -> bool:
    return all(t in wide or (t == "integer" and "number" in wide) for t in narrow)


def _shown(values: set[str] | frozenset[str]) -> str:
    return ", ".join(sorted(values))


@dataclasses.dataclass
class Pair:
    """One pair of schemas under comparison, and the rules that judge their keywords."""
    walk: SchemaComparison
    direction: str
    label: str
    subject: str
    field: str  # the dotted path of the field under comparison ("" outside any)
    old: View
    new: View

    @property
    def request(self) -> bool:
        return self.direction == REQUEST

    def report(self, narrows: bool, kind: str, message: str, where: str | None = None) -> None:
        """A change that narrows the values the schema allows (breaking in a request: the gateway
        refuses what it took) or widens them (breaking in a response: a client gets what it did not
        expect)."""
        self.walk.record(Level.BREAKING if narrows == self.request else Level.ADDITIVE, kind, where or self.new.where,
                         f"{self.label}: {message}", self.subject)

    def breaking(self, kind: str, message: str, where: str | None = None) -> None:
        self.walk.record(Level.BREAKING, kind, where or self.new.where, f"{self.label}: {message}", self.subject)

    def nullability(self) -> None:
        before, after = self.old.takes_null, self.new.takes_null
        if before and not after:
            self.report(True, "null-refused" if self.request else "null-dropped",
                        "no longer accepts null" if self.request else "is no longer null", self.new.origin)
        elif after and not before:
            self.report(False, "nullable-added", "now accepts null" if self.request else "may now be null",
                        self.new.origin)

    def types(self) -> None:
        before, after = self.old.types, self.new.types
        if before == after:
            return
        where = child(self.new.where, "type")
        if before is None:
            self.report(True, "type-restricted", f"now only of type {_shown(after or frozenset())}", where)
        elif after is None:
            self.report(False, "type-unrestricted", f"no longer restricted to type {_shown(before)}", where)
        else:
            # a request must still take every old type; a response must give no new one
            kept = _covers(after, before) if self.request else _covers(before, after)
            self.walk.record(Level.ADDITIVE if kept else Level.BREAKING, "type-changed", where,
                             f"{self.label}: type changed from {_shown(before)} to {_shown(after)}", self.subject)

    def values(self) -> None:
        before, after = self.old.values, self.new.values
        keyword = "const" if "const" in self.new.schema or "const" in self.old.schema else "enum"
        where = child(self.new.where, keyword)
        if before == after:
            return
        if before is None:
            self.report(True, f"{keyword}-added", f"now restricted to {_shown(after or set())} ({keyword} added)",
                        where)
        elif after is None:
            self.report(False, f"{keyword}-removed", f"no longer restricted to {_shown(before)}", where)
        else:
            if before - after:
                self.report(True, "enum-narrowed", f"{keyword} narrowed: {_shown(before - after)} removed", where)
            if after - before:
                self.report(False, "enum-widened", f"{keyword} widened: {_shown(after - before)} added", where)

    def bounds(self) -> None:
        for keyword, upper in BOUNDS:
            before, after = self.old.schema.get(keyword), self.new.schema.get(keyword)
            if before == after:
                continue
            where = child(self.new.where, keyword)
            numeric = all(isinstance(value, int | float) and not isinstance(value, bool)
                          for value in (before, after) if value is not None)
            if not numeric:
                self.breaking(f"{keyword}-changed", f"{keyword} changed from {before} to {after}", where)
                continue
            if before is None:
                tighter, said = True, f"{keyword} {after} added"
            elif after is None:
                tighter, said = False, f"{keyword} {before} removed"
            else:
                tighter = after < before if upper else after > before
                said = f"{keyword} {'lowered' if after < before else 'raised'} from {before} to {after}"
            self.report(tighter, f"{keyword}-{'tightened' if tighter else 'loosened'}", said, where)

    def text(self) -> None:
        self._pattern()
        before, after = self.old.schema.get("format"), self.new.schema.get("format")
        if before != after:
            where = child(self.new.where, "format")
            if before is None:
                self.report(True, "format-added", f"format {after} added", where)
            elif after is None:
                self.report(False, "format-removed", f"format {before} removed", where)
            else:
                self.breaking("format-changed", f"format changed from {before} to {after}", where)

    def _pattern(self) -> None:
        before, after = self.old.schema.get("pattern"), self.new.schema.get("pattern")
        if before == after:
            return
        where = child(self.new.where if after is not None else self.old.where, "pattern")
        if before is None:
            self.report(True, "pattern-added", f"pattern {after!r} added", where)
        elif after is None:
            self.report(False, "pattern-removed", f"pattern {before!r} removed", where)
        else:
            # a request must still take what the old pattern took; a response must give nothing new
            source, target = (before, after) if self.request else (after, before)
            try:
                escaped = patterns.escapee(source, target)
            except ValueError as exc:
                self.breaking("pattern-changed", f"pattern changed from {before!r} to {after!r} ({exc})", where)
                return
            if escaped is None:
                self.walk.record(Level.ADDITIVE, "pattern-loosened" if self.request else "pattern-tightened", where,
                                 f"{self.label}: pattern changed from {before!r} to {after!r}, and no string the "
                                 f"{'old' if self.request else 'new'} one takes was found that the "
                                 f"{'new' if self.request else 'old'} one refuses", self.subject)
            elif self.request:
                self.breaking("pattern-tightened", f"pattern changed from {before!r} to {after!r}, which refuses "
                              f"{escaped!r}", where)
            else:
                self.breaking("pattern-loosened", f"pattern changed from {before!r} to {after!r}, which lets "
                              f"{escaped!r} through", where)

    def default(self) -> None:
        before, after = self.old.schema.get("default"), self.new.schema.get("default")
        if self.request and "default" in self.old.schema and canonical(before) != canonical(after):
            said = ("removed" if "default" not in self.new.schema
                    else f"changed from {canonical(before)} to {canonical(after)}")
            self.breaking("default-changed", f"default {said}: a client that leaves it out is served otherwise",
                          child(self.new.where, "default"))

    def unjudged(self) -> None:
        for keyword in UNJUDGED:
            before, after = self.old.schema.get(keyword), self.new.schema.get(keyword)
            if canonical(without_docs(before)) != canonical(without_docs(after)):
                self.breaking(f"{keyword}-changed", f"`{keyword}` changed: the check cannot tell a loosening from a "
                              "tightening here, so it counts as breaking", child(self.new.where, keyword))
