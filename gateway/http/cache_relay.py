"""A vendor stream passed on to the client and put back together for the response cache
(http/cache.py): the entry a stream makes once the vendor ended it cleanly."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from gateway.core.chat import ChatChoice
from gateway.core.completion import Choice, Chunk, Usage
from gateway.core.inference import NativeChoice
from gateway.http.cache import Entry, Lookup, storable


class Relay:
    """A vendor stream's rest, passed on as it is, its answer (with its `first` chunks) kept in
    the cache once the vendor ended it cleanly. Closing it closes the vendor's stream, whether
    or not it was read (a stream's response closes what it was given)."""

    __slots__ = ("_rest", "_collected", "_model", "_looked", "_ended")

    def __init__(self, first: list[Chunk], rest: AsyncIterator[list[Chunk]], model: str, looked: Lookup) -> None:
        self._rest = rest
        self._collected = Collected()
        self._collected.add(first)
        self._model = model
        self._looked = looked
        self._ended = False

    def __aiter__(self) -> Relay:
        return self

    async def __anext__(self) -> list[Chunk]:
        try:
            batch = await anext(self._rest)
        except StopAsyncIteration:
            if not self._ended:
                self._ended = True
                self._collected.complete = True
                await self._looked.keep(self._model, self._collected.entry())
            raise
        self._collected.add(batch)
        return batch

    async def aclose(self) -> None:
        await self._rest.aclose()  # type: ignore[attr-defined]


class Collected:
    """A stream's choices put back together as it passes (`relay`), to be kept once it ended
    cleanly: each choice's text and logprobs joined, its first finish reason, the final usage (a
    vendor's own events, `NativeChoice`s, kept as the choice that stands for the answer their end
    gave: `as_chat`).

    Linear in the stream's pieces: they are kept as they come and each choice is joined once, when
    its entry is made (joining at every piece copied the text so far each time: quadratic in a
    stream of many small pieces, tool arguments say; docs/performance.md). The pieces are left as
    they are: the client is sent them too."""

    def __init__(self) -> None:
        self._pieces: dict[int, list[Choice]] = {}
        self.usage: Usage | None = None
        self.complete = False

    def add(self, batch: list[Chunk]) -> None:
        for chunk in batch:
            if chunk.usage is not None:
                self.usage = chunk.usage
            for piece in chunk.choices:
                found = self._pieces.get(piece.index)
                if found is None:
                    self._pieces[piece.index] = [piece]
                else:
                    found.append(piece)

    def entry(self) -> Entry | None:
        if not self.complete:
            return None
        choices = []
        for i in sorted(self._pieces):
            pieces = self._pieces[i]
            if isinstance(pieces[0], NativeChoice):  # a vendor's own events: the choice standing for their answer
                choice = next((p.as_chat for p in reversed(pieces) if isinstance(p, NativeChoice) and p.as_chat), None)
                if choice is None:
                    return None
                choices.append(choice)
                continue
            choice = _joined(pieces)
            if isinstance(choice, ChatChoice) and choice.tool_calls:
                whole = _whole_calls(choice.tool_calls)
                if whole is None:
                    return None
                choice.tool_calls = whole
            choices.append(choice)
        if not choices or not storable(choices, self.usage):
            return None
        assert self.usage is not None
        return Entry(choices, self.usage)


def _joined(pieces: list[Choice]) -> Choice:
    """A choice's pieces as one new choice: the texts joined, the first finish reason, the logprobs
    joined; a chat choice's tool call pieces in order, its deprecated `function_call` (the name in
    its first piece, the arguments in pieces) and its refusal joined."""
    first = pieces[0]
    choice = dataclasses.replace(first, text="".join([p.text for p in pieces]),
                                 finish_reason=next((p.finish_reason for p in pieces if p.finish_reason), None),
                                 logprobs=_joined_logprobs([p.logprobs for p in pieces if p.logprobs is not None]))
    if isinstance(choice, ChatChoice):
        chat = [p for p in pieces if isinstance(p, ChatChoice)]
        choice.tool_calls = [call for p in chat for call in p.tool_calls or ()] or None
        functions = [p.function_call for p in chat if p.function_call is not None]
        if len(functions) > 1:
            choice.function_call = functions[0] | {"arguments": "".join([f.get("arguments") or "" for f in functions])}
        elif functions:
            choice.function_call = dict(functions[0])
        refusals = [p.refusal for p in chat if p.refusal]
        choice.refusal = "".join(refusals) if refusals else first.refusal  # type: ignore[attr-defined]
    return choice


def _joined_logprobs(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Pieces' logprobs as one: each field's lists concatenated (legacy lists, or chat's `content`
    and `refusal`), any other value the last one given."""
    if not parts:
        return None
    joined: dict[str, Any] = {}
    for part in parts:
        for name, value in part.items():
            mine = joined.get(name)
            if isinstance(value, list) and isinstance(mine, list):
                mine.extend(value)  # (a list of its own: made below)
            elif isinstance(value, list):
                joined[name] = list(value)
            elif value is not None or name not in joined:
                joined[name] = value
    return joined


def _whole_calls(pieces: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """A stream's pieces of tool calls (OpenAI's deltas: each with its call's index; the id and the
    function's name in its first piece, the arguments in pieces) as whole calls in index order;
    None when they do not make whole calls (an answer not to keep)."""
    calls: dict[int, tuple[dict[str, Any], list[str]]] = {}
    for piece in pieces:
        index, function = piece.get("index"), piece.get("function") or {}
        found = calls.get(index) if isinstance(index, int) else None
        if found is None:
            if not isinstance(index, int) or not piece.get("id") or not function.get("name"):
                return None
            found = calls[index] = ({"id": piece["id"], "type": "function",
                                     "function": {"name": function["name"], "arguments": ""}}, [])
        found[1].append(function.get("arguments") or "")
    whole = []
    for i in sorted(calls):
        call, arguments = calls[i]
        call["function"]["arguments"] = "".join(arguments)
        whole.append(call)
    return whole
