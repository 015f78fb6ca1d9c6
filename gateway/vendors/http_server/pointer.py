"""JSON Pointers (RFC 6901): where in a JSON document a value is, as an operator writes it in a
vendor's configuration (`/details/generated_tokens`) and as the gateway reads untrusted documents
with it.

A pointer is checked once, when the configuration is loaded (`JsonPointer`, a pydantic type), and
resolved against vendor answers and client `args` many times: resolving never raises on the
document (a missing member, an index past a list's end, a value of the wrong kind along the way all
read as `ABSENT`), so a hostile answer can only make a count "not reported", never an error of the
gateway's own.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Annotated, Any, Final

from pydantic import AfterValidator

# An operator's pointer is a handful of names; a long or deep one is a mistake, and a bound keeps
# every resolution a few steps.
MAX_POINTER_CHARS = 256
MAX_POINTER_DEPTH = 16
# A list index: 0, or digits without a leading zero (RFC 6901 section 4). "-" (past the end) names
# nothing that can be read.
_INDEX = re.compile(r"0|[1-9][0-9]{0,8}")
_BAD_ESCAPE = re.compile(r"~(?![01])")


class _Absent:
    """What a pointer finds where the document has nothing (distinct from a JSON null)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Final = _Absent()


def check(pointer: str) -> str:
    """`pointer` when it is a well-formed RFC 6901 pointer within the bounds, else ValueError
    (pydantic reports it as the option's error)."""
    if not isinstance(pointer, str):
        raise ValueError("a JSON pointer is a string")
    if len(pointer) > MAX_POINTER_CHARS:
        raise ValueError(f"a JSON pointer is at most {MAX_POINTER_CHARS} characters")
    if pointer and not pointer.startswith("/"):
        raise ValueError("a JSON pointer is empty (the whole document) or starts with '/' (RFC 6901)")
    if _BAD_ESCAPE.search(pointer):
        raise ValueError("in a JSON pointer '~' is written only as ~0 ('~') or ~1 ('/')")
    if any(ord(c) < 0x20 or c == "\x7f" for c in pointer):
        raise ValueError("a JSON pointer holds no control characters")
    if len(tokens(pointer)) > MAX_POINTER_DEPTH:
        raise ValueError(f"a JSON pointer is at most {MAX_POINTER_DEPTH} members deep")
    return pointer


@lru_cache(maxsize=1024)
def tokens(pointer: str) -> tuple[str, ...]:
    """The reference tokens of a well-formed pointer, unescaped ("" -> ())."""
    if not pointer:
        return ()
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/"))


def resolve(pointer: str, document: Any) -> Any:
    """The value `pointer` names in `document` (decoded JSON), or ABSENT."""
    value = document
    for token in tokens(pointer):
        if isinstance(value, dict):
            if token not in value:
                return ABSENT
            value = value[token]
        elif isinstance(value, list):
            if not _INDEX.fullmatch(token) or int(token) >= len(value):
                return ABSENT
            value = value[int(token)]
        else:
            return ABSENT
    return value


def name(pointer: str, root: str = "args") -> str:
    """The pointer as the gateway's errors name a field (`param`): `/parameters/max_new_tokens`
    under `args` is `args.parameters.max_new_tokens`, a list index `[0]`."""
    out = root
    for token in tokens(pointer):
        out += f"[{token}]" if _INDEX.fullmatch(token) else f".{token}"
    return out


# An option that is a pointer, checked when the configuration loads.
JsonPointer = Annotated[str, AfterValidator(check)]
