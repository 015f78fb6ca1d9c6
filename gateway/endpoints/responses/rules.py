"""What a Responses request must hold that the schema cannot say: its JSON Schemas (function
tools' `parameters`, `text.format.schema`) self-contained and within the gateway's bounds, as
chat's are (core/client_schemas.py: the gateway fetches nothing a schema names; a 422 naming where
it stands). On every vendor alike: a schema the gateway compiles (a strict format's, which answers
are held to) and one it only passes on are both a client's, untrusted."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gateway.core import client_schemas
from gateway.core.errors import ValidationFailed

FORMAT_SCHEMA = ("body", "text", "format", "schema")  # where a request's answer schema stands


def check(body: Mapping[str, Any]) -> None:
    problems = list(client_schemas.problems(_schemas(body)))
    if problems:
        raise ValidationFailed.in_body(problems)


def answer_format(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request's `text.format` ({} when it set none)."""
    return (body.get("text") or {}).get("format") or {}


def strict(format_: Mapping[str, Any]) -> bool:
    """Whether answers are held to the format's schema (OpenAI holds a strict one's only)."""
    return format_.get("type") == "json_schema" and bool(format_.get("strict")) and "schema" in format_


def _schemas(body: Mapping[str, Any]) -> Iterator[client_schemas.Checked]:
    for i, tool in enumerate(body.get("tools") or ()):
        if tool.get("type") == "function" and tool.get("parameters") is not None:
            yield ("tools", i, "parameters"), tool["parameters"], False
    format_ = answer_format(body)
    if format_.get("type") == "json_schema" and "schema" in format_:
        yield FORMAT_SCHEMA[1:], format_["schema"], strict(format_)
