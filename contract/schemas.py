"""Two JSON Schemas compared in one direction, for what a deployed client could break on.

In a request the gateway reads what a client sends: the values it accepts must not shrink (an enum
narrowed, a maximum lowered, a field made required, a type narrowed are breaking; the opposite is
additive). In a response the client reads what the gateway sends: the values it may get must not
grow (an enum widened, a field made optional or nullable, a type widened, a bound loosened are
breaking), except that an object may gain fields, which clients ignore.

`$ref`s are followed into the document on each side; a pair of schemas is compared once per
direction in a walk, which also ends cycles."""

from __future__ import annotations

from collections.abc import Callable

from contract import structures
from contract.keywords import REQUEST, RESPONSE, Pair
from contract.nodes import Node, view

__all__ = ["REQUEST", "RESPONSE", "Node", "SchemaComparison"]

Record = Callable[..., None]  # record(level, kind, where, message, subject, named=False)


class SchemaComparison:
    """One walk: the old document's schemas against the new one's, reporting through `record`."""

    def __init__(self, old_document: dict, new_document: dict, record: Record) -> None:
        self.old_document, self.new_document, self.record = old_document, new_document, record
        self._seen: set[tuple[str, str, str]] = set()

    def compare(self, old: Node, new: Node, direction: str, label: str, subject: str, field: str = "",
                alternative: bool = False) -> None:
        """`label` names the place in messages ("request field `n`"); `subject` is what a changelog
        entry names for it (the field, parameter or operation); `field` is the dotted path of the
        field. An `alternative` of a choice leaves null to the choice, which judged it."""
        pair = Pair(self, direction, label, subject, field, view(self.old_document, old), view(self.new_document, new))
        key = (pair.old.where, pair.new.where, direction)
        if key in self._seen:
            return
        self._seen.add(key)
        if not alternative:
            pair.nullability()
        if bool(pair.old.branches) != bool(pair.new.branches):
            structures.alternatives(pair)  # a single schema against a choice: compared as choices
            return
        pair.types()
        pair.values()
        pair.bounds()
        pair.text()
        pair.default()
        pair.unjudged()
        structures.properties(pair)
        structures.additional_properties(pair)
        structures.items(pair)
        structures.alternatives(pair)
        structures.all_of(pair)
        structures.discriminator(pair)
