"""The output bound a token budget reserves, read from the protocol's own member of `args`.

A key or account with a token budget is admitted on a reservation: the prompt's estimate plus the
most the vendor may generate. On this endpoint the most is what the protocol's own bound says
(Anthropic's `max_tokens`, Gemini's `generationConfig.maxOutputTokens`, OpenAI's
`max_completion_tokens` or `max_tokens`, llama.cpp's `n_predict`, an http vendor's configured
member), times the choices asked for (OpenAI's `n`, Gemini's `candidateCount`). Without a bound the
vendor may generate without end, so the request is refused naming the member to set
(`output_bound_required`), unless the protocol's own default is bounded (an http vendor's
`output_bound_default`, e.g. TGI's 100). A bound that is not a whole number in range is refused
(`invalid_output_bound`): the reservation must be a number the gateway can trust.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.completion import MAX_USAGE_TOKENS
from gateway.core.errors import BadRequest
from gateway.endpoints.inference.wires import NativeWire
from gateway.vendors.http_server.pointer import ABSENT, name, resolve

# The most choices one request may ask for, as the reservation reads them: OpenAI takes up to 128.
MAX_CHOICES = 128


@dataclass(frozen=True, slots=True)
class OutputBound:
    tokens: int  # what the reservation holds for the output: per_choice x choices
    per_choice: int
    choices: int
    field: str | None  # where it was read (`args.max_tokens`), None for the protocol's default


def output_bound(wire: NativeWire, args: dict[str, Any], *, vendor: str) -> OutputBound | None:
    """The most the vendor may generate for `args`, or None when nothing bounds it."""
    found: list[tuple[int, str]] = []
    for pointer in wire.output_bounds:
        value = resolve(pointer, args)
        if value is ABSENT or value is None or (_whole(value) and value in wire.unbounded):
            continue
        if not _whole(value) or not 0 <= value <= MAX_USAGE_TOKENS:
            raise _invalid(pointer, vendor, f"a whole number from 0 to {MAX_USAGE_TOKENS}")
        found.append((value, pointer))
    if found:
        per_choice, pointer = max(found)
        field: str | None = name(pointer)
    elif wire.output_bound_default is not None:
        per_choice, field = wire.output_bound_default, None
    else:
        return None
    choices = 1
    if wire.choices is not None and (value := resolve(wire.choices, args)) is not ABSENT and value is not None:
        if not _whole(value) or not 1 <= value <= MAX_CHOICES:
            raise _invalid(wire.choices, vendor, f"a whole number from 1 to {MAX_CHOICES}")
        choices = value
    return OutputBound(per_choice * choices, per_choice, choices, field)


def reserved_output(wire: NativeWire, args: dict[str, Any], *, vendor: str) -> OutputBound:
    """The bound a budgeted request is admitted on; a 400 naming the member to set when none."""
    bound = output_bound(wire, args, vendor=vendor)
    if bound is not None:
        return bound
    if not wire.output_bounds:
        raise BadRequest(f"vendor '{vendor}' names no member that bounds its output (the `output_bound` option of "
                         f"its configuration), so a key with a token budget cannot be admitted to it",
                         code="output_bound_required", vendor=vendor)
    field = name(wire.output_bounds[0])
    unbounded = f" ({', '.join(map(str, sorted(wire.unbounded)))} is unbounded)" if wire.unbounded else ""
    raise BadRequest(f"a key with a token budget needs `{field}`{unbounded}: the most vendor '{vendor}' may "
                     f"generate, which the budget reserves", code="output_bound_required", param=field,
                     vendor=vendor)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _invalid(pointer: str, vendor: str, allowed: str) -> BadRequest:
    field = name(pointer)
    return BadRequest(f"`{field}` must be {allowed} for vendor '{vendor}'", code="invalid_output_bound",
                      param=field, vendor=vendor)
