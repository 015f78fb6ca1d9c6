"""Whether a new `pattern` still accepts what an old one accepted.

Inclusion of regular languages is decidable but not with Python's `re`; a counterexample is enough
to prove a pattern tightened, so strings are drawn from the old pattern (hypothesis, derandomized: the
same answer on every run) and tried against the new one. No counterexample among them is taken as
"loosened or equal" and said so; a pattern that does not compile is judged tightened."""

from __future__ import annotations

import functools
import re

EXAMPLES = 200  # strings drawn from the old pattern (a changed pattern costs about a second)


@functools.cache
def escapee(old: str, new: str) -> str | None:
    """A string that JSON Schema's `pattern: old` accepts and `pattern: new` refuses; None when
    none was found. Raises ValueError when either is not a regular expression Python reads."""
    from hypothesis import HealthCheck, find, settings, strategies
    from hypothesis.errors import NoSuchExample

    try:
        compiled = re.compile(new)
        drawn = strategies.from_regex(re.compile(old))
    except re.error as exc:
        raise ValueError(str(exc)) from None
    try:
        return find(drawn, lambda text: compiled.search(text) is None,
                    settings=settings(derandomize=True, max_examples=EXAMPLES, database=None, deadline=None,
                                      suppress_health_check=list(HealthCheck)))
    except NoSuchExample:
        return None
