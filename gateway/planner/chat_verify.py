"""A chat answer held to what was asked, before the client sees it (planner/verify.py does the same
for completions): exactly `n` choices, each with one finish reason; a tool call's arguments that
parse as JSON (a model writes them, and a client runs code on them); content that parses as JSON
when `response_format` asked for it, matching a strict schema. Anything else is the vendor's
failure (502), never a success: a JSON answer cut short by `max_tokens` is passed on as what it
says it is (`finish_reason: length`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema_rs
import orjson

from gateway.core import client_schemas
from gateway.core.chat import ChatCall, ChatChoice
from gateway.core.completion import Chunk, Result
from gateway.core.errors import VendorFailed

STRICT_SCHEMA = ("body", "response_format", "json_schema", "schema")  # where a request's strict schema stands


def strict_schema(response_format: Mapping[str, Any]) -> Any | None:
    """The schema an answer must match: a strict json_schema's only (OpenAI holds only those to it)."""
    described = (response_format.get("json_schema") or {}) if response_format.get("type") == "json_schema" else {}
    return described["schema"] if described.get("strict") and "schema" in described else None


def answer_schema(call: ChatCall) -> jsonschema_rs.Validator | None:
    """The validator of `call`'s strict schema, if it has one, compiled once for all of a plan's
    vendor calls, before any (a client's schema, checked by endpoints/chat/rules.py; a 422 when it
    cannot be compiled; it fetches nothing)."""
    schema = strict_schema(call.parameters.get("response_format") or {})
    return None if schema is None else client_schemas.compiled(schema, STRICT_SCHEMA)


class ChatExpected:
    __slots__ = ("_call", "_vendor", "_finished", "_json", "_schema", "_contents", "_arguments")

    def __init__(self, call: ChatCall, vendor: str, schema: jsonschema_rs.Validator | None) -> None:
        """`schema`: `answer_schema(call)`."""
        self._call = call
        self._vendor = vendor
        self._finished: dict[int, str] = {}
        format_ = call.parameters.get("response_format") or {}
        self._json = format_.get("type") in ("json_object", "json_schema")
        self._schema = schema
        self._contents: dict[int, list[str]] = {}  # a stream's content per choice, when it must parse
        self._arguments: dict[tuple[int, int], list[str]] = {}  # a stream's tool call arguments

    def result(self, result: Result) -> None:
        indexes = sorted(c.index for c in result.choices)
        if indexes != list(range(self._call.n)):
            self._fail(f"answered {len(indexes)} choice(s) for n = {self._call.n}")
        for choice in result.choices:
            assert isinstance(choice, ChatChoice)
            for call in choice.tool_calls or ():
                self._arguments_parse(call["function"].get("arguments", ""))
            if choice.function_call is not None:
                self._arguments_parse(choice.function_call.get("arguments", ""))
            self._content_parses(choice.text, choice.finish_reason, choice.tool_calls)

    def chunk(self, chunk: Chunk) -> None:
        for choice in chunk.choices:
            assert isinstance(choice, ChatChoice)
            index = choice.index
            if index in self._finished:
                if choice.text or choice.tool_calls or choice.finish_reason:
                    self._fail(f"went on with choice {index} after it finished")
                continue
            if self._json and choice.text:
                self._contents.setdefault(index, []).append(choice.text)
            for call in choice.tool_calls or ():
                self._arguments.setdefault((index, call["index"]), []).append(
                    call.get("function", {}).get("arguments") or "")
            if choice.function_call is not None:
                self._arguments.setdefault((index, -1), []).append(choice.function_call.get("arguments") or "")
            if choice.finish_reason is not None:
                self._finished[index] = choice.finish_reason

    def ended(self) -> None:
        """The stream ended cleanly: every choice finished, its JSON whole."""
        if sorted(self._finished) != list(range(self._call.n)):
            self._fail(f"ended the stream with {len(self._finished)} of {self._call.n} choice(s) finished")
        for (index, _), pieces in self._arguments.items():
            if self._finished[index] != "length":
                self._arguments_parse("".join(pieces))
        for index, finish in self._finished.items():
            self._content_parses("".join(self._contents.get(index, ())), finish, None)

    def _arguments_parse(self, arguments: str) -> None:
        try:
            orjson.loads(arguments or "{}")
        except orjson.JSONDecodeError:
            self._fail("called a tool with arguments that are not JSON")

    def _content_parses(self, content: str, finish: str | None, tool_calls: Any) -> None:
        if not self._json or finish != "stop" or (tool_calls and not content):
            return
        try:
            value = orjson.loads(content)
        except orjson.JSONDecodeError:
            self._fail("answered content that is not the JSON the response_format asked for")
        if not isinstance(value, dict) and self._schema is None:
            self._fail("answered JSON that is not an object, as json_object asks")
        if self._schema is not None and not self._schema.is_valid(value):
            self._fail("answered JSON that does not match the strict json_schema asked for")

    def _fail(self, why: str) -> None:
        raise VendorFailed(f"vendor '{self._vendor}' {why}", vendor=self._vendor)
