"""Holding each vendor call's answer to what the call asked of the vendor, for every endpoint.

A vendor that answers 200 has not always done what it was asked: a server may cap `n` or a list
of prompts and answer fewer choices, ignore `echo`, leave out logprobs, report usage that cannot
cover the text it sent, call a tool with arguments that are not JSON, or answer a JSON
`response_format` with something else. Whatever it was asked to do natively (the call as sent:
what the gateway emulates is its own business) is checked on its answer here, for every vendor
alike:

- every call: exactly `n` choices per prompt (a chat call's conversation is one), indexed 0..;
- a call asking `echo`: each choice starts with its prompt; asking legacy `logprobs`: each choice
  with text has them; a usage below what the answer shows is raised to what can be counted in it
  (one token per choice that has text, or its logprobs' tokens), marked estimated;
- a chat call: one finish reason per choice (a stream ends with every choice finished, and goes
  on with none after its finish); a tool call's arguments parse as JSON (a model writes them, and a
  client runs code on them); content parses as JSON when `response_format` asked for it, matching
  a strict schema. A JSON answer cut short by `max_tokens` is passed on as what it says it is
  (`finish_reason: length`);
- a chat call forcing a tool (`tool_choice` "required", or a named function, with its tools; the
  deprecated `function_call` naming one of its `functions`): each choice calls one (the one named)
  unless the vendor says it filtered the answer (`content_filter`). A server may take
  `tool_choice` and answer text all the same (llama.cpp's does, measured:
  tests/integration/test_llamacpp_parameters.py); a client that forced a call runs it, and text in
  its place is not what it paid for.

An answer that falls short is the vendor's failure (a 502, or an error event once a stream has
begun), never relayed as a success.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema_rs
import orjson

from gateway.core import client_schemas
from gateway.core.chat import ChatChoice
from gateway.core.completion import Call, Choice, Chunk, Result
from gateway.core.endpoint import CONVERSATIONS, Endpoint
from gateway.core.errors import VendorFailed

log = logging.getLogger("gateway.vendors")

_NONE: dict = {}  # (never written: only a chat call's stream fills these)
ECHOED = "\x00echoed"  # a stream's choice whose prompt came whole (no text is this object)
STRICT_SCHEMA = ("body", "response_format", "json_schema", "schema")  # where a request's strict schema stands


def strict_schema(response_format: Mapping[str, Any]) -> Any | None:
    """The schema an answer must match: a strict json_schema's only (OpenAI holds only those to it)."""
    described = (response_format.get("json_schema") or {}) if response_format.get("type") == "json_schema" else {}
    return described["schema"] if described.get("strict") and "schema" in described else None


def answer_schema(call: Call) -> jsonschema_rs.Validator | None:
    """The validator of `call`'s strict schema, if it has one, compiled once for all of a plan's
    vendor calls, before any (a client's schema, checked by endpoints/chat/rules.py; a 422 when it
    cannot be compiled; it fetches nothing)."""
    schema = strict_schema(call.given("response_format") or {})
    return None if schema is None else client_schemas.compiled(schema, STRICT_SCHEMA)


def forced_tool(call: Call) -> str | None:
    """The tool a chat call forces its answer to call: its name, "" for any (`tool_choice`
    "required"), or None when it forces none (no tools, or tool_choice none or auto)."""
    choice = call.given("tool_choice")
    if not call.given("tools") or choice is None:
        function = call.given("function_call")  # the deprecated functions: forced by name alone
        return function.get("name") if call.given("functions") and isinstance(function, dict) else None
    if isinstance(choice, dict):
        return (choice.get("function") or {}).get("name")
    return "" if choice == "required" else None


class Expected:
    """What one vendor call must answer (see the module). A whole answer is shown to it once
    (`result`); a stream's chunks as they come (`batch`, a read's), and its clean end (`ended`)."""

    __slots__ = ("vendor", "choices", "_n", "_echoed", "_logprobs", "_seen", "_heads", "_done", "_finishing",
                 "_finished", "_json", "_schema", "_contents", "_arguments", "_forced", "_forcing", "_called")

    def __init__(self, call: Call, vendor: str, schema: jsonschema_rs.Validator | None = None) -> None:
        """`schema`: the plan's `answer_schema(call)`, compiled once."""
        self.vendor = vendor
        self._n = call.n
        self.choices = call.n * max(len(call.prompts), 1)
        legacy = call.endpoint is Endpoint.COMPLETIONS  # its echo and its count of logprobs
        self._echoed: Sequence[str] | None = call.prompts if legacy and call.given("echo") else None
        self._logprobs = legacy and call.given("logprobs") is not None
        self._seen: set[int] = set()
        self._heads: dict[int, str] = {}  # a stream's text per choice until its echo came whole (ECHOED)
        # A chat choice finishes once, and every one finishes: its JSON is checked whole then.
        self._finishing = finishing = call.endpoint in CONVERSATIONS
        format_ = (call.given("response_format") or {}) if finishing else {}
        self._json = format_.get("type") in ("json_object", "json_schema")
        self._schema = schema
        # What a chat stream's choices said so far (made for chat calls alone: a completion reads none).
        self._finished: dict[int, str] = {} if finishing else _NONE
        self._contents: dict[int, list[str]] = {} if finishing else _NONE  # content, when it must parse
        self._arguments: dict[tuple[int, int], list[str]] = {} if finishing else _NONE  # tool call arguments
        self._forced = forced_tool(call) if finishing else None
        self._forcing = "tool_choice" if finishing and call.given("tools") else "function_call"  # what forced it
        self._called: dict[int, set[str]] = {} if self._forced is not None else _NONE  # a stream's tools called
        # Nothing left to check in a stream's chunks: every choice came, and no piece is checked
        # (no echo, no logprobs, no finishing). Most completion streams are done after their first chunk.
        self._done = False

    # -- a whole answer --------------------------------------------------------------------
    def result(self, result: Result) -> Result:
        """`result`, when it answers the call (its usage raised where it cannot cover its text)."""
        indexes = {choice.index for choice in result.choices}
        if (indexes != set(range(self.choices)) if self._finishing else len(indexes) != self.choices) \
                or len(result.choices) != self.choices:
            raise self._short(len(indexes))
        for choice in result.choices:
            if self._echoed is not None and not choice.text.startswith(self._prompt(choice.index)):
                raise self._failed("did not echo the prompt (echo: true)")
            if self._logprobs and choice.text and choice.logprobs is None:
                raise self._failed("returned no logprobs although they were asked for")
            if isinstance(choice, ChatChoice):
                for call in choice.tool_calls or ():
                    self._arguments_parse(call["function"].get("arguments", ""))
                if choice.function_call is not None:
                    self._arguments_parse(choice.function_call.get("arguments", ""))
                self._content_parses(choice.text, choice.finish_reason, choice.tool_calls)
                if self._forced is not None:
                    called = {c["function"].get("name", "") for c in choice.tool_calls or ()}
                    if choice.function_call is not None:
                        called.add(choice.function_call.get("name", ""))
                    self._tool_called(called, choice.finish_reason)
        usage = result.usage
        if usage is not None and not self._finishing:
            least = sum(self._least_tokens(choice) for choice in result.choices)
            if usage.completion_tokens < least:
                log.warning("vendor %s reported %d completion tokens for an answer of at least %d; counted %d",
                            self.vendor, usage.completion_tokens, least, least)
                result.usage = dataclasses.replace(usage, completion_tokens=least, estimated=True)
        return result

    # -- a stream --------------------------------------------------------------------------
    def batch(self, chunks: list[Chunk]) -> None:
        """A stream's chunks of one read, as the vendor sent them."""
        if self._done:
            return
        seen, echoed, logprobs, finishing = self._seen, self._echoed, self._logprobs, self._finishing
        for chunk in chunks:
            for choice in chunk.choices:
                seen.add(choice.index)
                if echoed is not None:
                    self._echo_piece(choice)
                if logprobs and choice.text and choice.logprobs is None:
                    raise self._failed("returned no logprobs although they were asked for")
                if finishing:
                    self._chat_piece(choice)
        self._done = echoed is None and not logprobs and not finishing and len(seen) == self.choices

    def ended(self) -> None:
        """The vendor ended its stream cleanly: every choice must have come (echoed; a chat choice
        finished, its JSON whole)."""
        if self._finishing:
            if sorted(self._finished) != list(range(self.choices)):
                raise self._failed(f"ended the stream with {len(self._finished)} of {self.choices} choice(s) "
                                   "finished")
            for (index, _), pieces in self._arguments.items():
                if self._finished[index] != "length":
                    self._arguments_parse("".join(pieces))
            for index, finish in self._finished.items():
                self._content_parses("".join(self._contents.get(index, ())), finish, None)
                if self._forced is not None:
                    self._tool_called(self._called.get(index, set()), finish)
            return
        if len(self._seen) != self.choices:
            raise self._short(len(self._seen))
        if self._echoed is not None and any(self._prompt(i) and self._heads.get(i) is not ECHOED
                                            for i in range(self.choices)):
            raise self._failed("did not echo the prompt (echo: true)")

    def _chat_piece(self, choice: Choice) -> None:
        index = choice.index
        tool_calls = choice.tool_calls if isinstance(choice, ChatChoice) else None
        function_call = choice.function_call if isinstance(choice, ChatChoice) else None
        if index in self._finished:
            if choice.text or tool_calls or choice.finish_reason:
                raise self._failed(f"went on with choice {index} after it finished")
            return
        if self._json and choice.text:
            self._contents.setdefault(index, []).append(choice.text)
        for call in tool_calls or ():
            self._arguments.setdefault((index, call["index"]), []).append(
                call.get("function", {}).get("arguments") or "")
            if self._forced is not None and "name" in call.get("function", {}):  # (a call's first piece)
                self._called.setdefault(index, set()).add(call["function"]["name"])
        if function_call is not None:
            self._arguments.setdefault((index, -1), []).append(function_call.get("arguments") or "")
            if self._forced is not None and "name" in function_call:
                self._called.setdefault(index, set()).add(function_call["name"])
        if choice.finish_reason is not None:
            self._finished[index] = choice.finish_reason

    def _echo_piece(self, choice: Choice) -> None:
        head = self._heads.get(choice.index, "")
        if head is ECHOED:
            return
        prompt = self._prompt(choice.index)
        head += choice.text
        if len(head) >= len(prompt):
            if not head.startswith(prompt):
                raise self._failed("did not echo the prompt (echo: true)")
            head = ECHOED
        elif not prompt.startswith(head):
            raise self._failed("did not echo the prompt (echo: true)")
        self._heads[choice.index] = head

    # -- what is checked -------------------------------------------------------------------
    def _least_tokens(self, choice: Choice) -> int:
        """The fewest completion tokens `choice` can have taken: none without generated text, else
        one, or as many as its logprobs name beyond an echoed prompt."""
        echoed = len(self._prompt(choice.index)) if self._echoed is not None else 0
        if len(choice.text) <= echoed:
            return 0
        offsets = (choice.logprobs or {}).get("text_offset") or ()
        return max(1, sum(1 for at in offsets if isinstance(at, int) and at >= echoed))

    def _arguments_parse(self, arguments: str) -> None:
        try:
            orjson.loads(arguments or "{}")
        except orjson.JSONDecodeError:
            raise self._failed("called a tool with arguments that are not JSON") from None

    def _content_parses(self, content: str, finish: str | None, tool_calls: Any) -> None:
        if not self._json or finish != "stop" or (tool_calls and not content):
            return
        try:
            value = orjson.loads(content)
        except orjson.JSONDecodeError:
            raise self._failed("answered content that is not the JSON the response_format asked for") from None
        if not isinstance(value, dict) and self._schema is None:
            raise self._failed("answered JSON that is not an object, as json_object asks")
        if self._schema is not None and not self._schema.is_valid(value):
            raise self._failed("answered JSON that does not match the strict json_schema asked for")

    def _tool_called(self, called: set[str], finish: str | None) -> None:
        forced = self._forced
        if forced is None or finish == "content_filter" or (called if forced == "" else forced in called):
            return
        if forced == "":
            raise self._failed('answered without calling a tool although tool_choice was "required"')
        raise self._failed(f"answered without calling {forced} although {self._forcing} named it")

    def _prompt(self, index: int) -> str:
        assert self._echoed is not None
        return self._echoed[index // self._n]

    def _short(self, answered: int) -> VendorFailed:
        if self._finishing:
            return self._failed(f"answered {answered} choice(s) for n = {self.choices}")
        return self._failed(f"answered {answered} of the {self.choices} choices asked for")

    def _failed(self, what: str) -> VendorFailed:
        code = None if self._finishing else "vendor_incomplete"
        return VendorFailed(f"vendor '{self.vendor}' {what}", code=code, vendor=self.vendor)
