"""Holding each vendor call's answer to what the call asked of the vendor.

A vendor that answers 200 has not always done what it was asked: a server may cap `n` or a list
of prompts and answer fewer choices, ignore `echo`, leave out logprobs, or report usage that
cannot cover the text it sent. Whatever it was asked to do natively (the call as sent: what the
gateway emulates is its own business) is checked on its answer here, for every vendor alike. An
answer that falls short is the vendor's failure (a 502, or an error event once a stream has begun),
never relayed as a success; a usage below what the answer shows is raised to what can be counted
in it (one token per choice that has text, or its logprobs' tokens), marked estimated.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from gateway.core.completion import Choice, Chunk, CompletionCall, Result
from gateway.core.errors import VendorFailed

log = logging.getLogger("gateway.vendors")

ECHOED = "\x00echoed"  # a stream's choice whose prompt came whole (no text is this object)


class Expected:
    """What one vendor call must answer: `choices` choices indexed 0.., each starting with its
    prompt when the vendor was asked to echo, each with logprobs when asked for them. A stream's
    chunks are shown to it as they come (`batch`), and its clean end (`ended`)."""

    __slots__ = ("vendor", "choices", "_n", "_echoed", "_logprobs", "_seen", "_heads", "_done")

    def __init__(self, call: CompletionCall, vendor: str) -> None:
        self.vendor = vendor
        self.choices = call.n * len(call.prompts)
        self._n = call.n
        self._echoed: Sequence[str] | None = call.prompts if call.echo else None
        self._logprobs = call.logprobs is not None
        self._seen: set[int] = set()
        self._heads: dict[int, str] = {}  # a stream's text per choice until its echo came whole (ECHOED)
        # Nothing left to check in a stream's chunks: every choice came, and no piece is checked
        # (no echo, no logprobs). Most streams are done after their first chunk.
        self._done = False

    def result(self, result: Result) -> Result:
        """`result`, when it answers the call (its usage raised where it cannot cover its text)."""
        indexes = {choice.index for choice in result.choices}
        if len(indexes) != self.choices or len(result.choices) != self.choices:
            raise self._short(len(indexes))
        for choice in result.choices:
            if self._echoed is not None and not choice.text.startswith(self._prompt(choice.index)):
                raise self._failed("did not echo the prompt (echo: true)")
            if self._logprobs and choice.text and choice.logprobs is None:
                raise self._failed("returned no logprobs although they were asked for")
        usage = result.usage
        if usage is not None:
            least = sum(self._least_tokens(choice) for choice in result.choices)
            if usage.completion_tokens < least:
                log.warning("vendor %s reported %d completion tokens for an answer of at least %d; counted %d",
                            self.vendor, usage.completion_tokens, least, least)
                result.usage = dataclasses.replace(usage, completion_tokens=least, estimated=True)
        return result

    def batch(self, chunks: list[Chunk]) -> None:
        """A stream's chunks of one read, as the vendor sent them."""
        if self._done:
            return
        seen, echoed, logprobs = self._seen, self._echoed, self._logprobs
        for chunk in chunks:
            for choice in chunk.choices:
                seen.add(choice.index)
                if echoed is not None:
                    self._echo_piece(choice)
                if logprobs and choice.text and choice.logprobs is None:
                    raise self._failed("returned no logprobs although they were asked for")
        self._done = echoed is None and not logprobs and len(seen) == self.choices

    def ended(self) -> None:
        """The vendor ended its stream cleanly: every choice must have come, echoed."""
        if len(self._seen) != self.choices:
            raise self._short(len(self._seen))
        if self._echoed is not None and any(self._prompt(i) and self._heads.get(i) is not ECHOED
                                            for i in range(self.choices)):
            raise self._failed("did not echo the prompt (echo: true)")

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

    def _least_tokens(self, choice: Choice) -> int:
        """The fewest completion tokens `choice` can have taken: none without generated text, else
        one, or as many as its logprobs name beyond an echoed prompt."""
        echoed = len(self._prompt(choice.index)) if self._echoed is not None else 0
        if len(choice.text) <= echoed:
            return 0
        offsets = (choice.logprobs or {}).get("text_offset") or ()
        return max(1, sum(1 for at in offsets if isinstance(at, int) and at >= echoed))

    def _prompt(self, index: int) -> str:
        assert self._echoed is not None
        return self._echoed[index // self._n]

    def _short(self, answered: int) -> VendorFailed:
        return self._failed(f"answered {answered} of the {self.choices} choices asked for")

    def _failed(self, what: str) -> VendorFailed:
        return VendorFailed(f"vendor '{self.vendor}' {what}", code="vendor_incomplete", vendor=self.vendor)
