"""Token log-probabilities in the legacy completions shape, from llama.cpp's chat-style ones (the
embedded engine, and OpenAI-compatible servers built on llama.cpp, answer /v1/completions so), and
the rule every conversion of ours follows: a token's `top_logprobs` always holds the token itself.
And chat's logprobs as OpenAI gives them (`chat_alternatives`, `as_asked`).

llama.cpp reports logprobs chat-style (`{"content": [{"id", "token", "bytes", "logprob",
"top_logprobs": [...]}]}`); the contract wants the legacy shape: parallel lists `tokens`,
`token_logprobs`, `top_logprobs` (per token a dict of at most `logprobs` alternatives, plus the
token itself) and
`text_offset` (each token's character offset in the choice's text, which starts with the prompt
when echoing).

Tokens are kept as raw bytes until they are rendered: a token may be a fragment of a multi-byte
character, which is written `bytes:\\xe3\\x81` as OpenAI does, and offsets count only complete
characters.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.vendors import untrusted as read


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One token of a choice. `logprob` and `top` are None for the first token of an echoed
    prompt (nothing precedes it to predict it from)."""

    raw: bytes
    logprob: float | None
    top: tuple[tuple[bytes, float], ...] | None  # most likely first, as the engine ranked them


def from_engine(entry: Any) -> TokenLogprob:
    """One chat-style engine entry, checked (untrusted.Malformed otherwise): its bytes a list of
    byte values (or, when null, the token's text), its logprobs finite, at most MAX_ALTERNATIVES
    alternatives read. A character split over several tokens arrives as one entry with the merged
    bytes and the last token's logprob (a llama.cpp limitation)."""
    entry = read.obj(entry, "a logprobs entry")
    alternatives = read.items(entry.get("top_logprobs"), "top_logprobs")[: read.MAX_ALTERNATIVES]
    return TokenLogprob(
        raw=raw_token(entry, "a logprobs entry"),
        logprob=read.logprob(entry.get("logprob"), "a logprobs entry's logprob"),
        top=tuple((raw_token(t, "an alternative"), read.logprob(t.get("logprob"), "an alternative's logprob"))
                  for t in alternatives),
    )


def raw_token(entry: Any, what: str) -> bytes:
    """A chat-style entry's token as bytes: `bytes` (null for a token without a byte form, as
    OpenAI documents), else its text."""
    entry = read.obj(entry, what)
    if entry.get("bytes") is not None:
        return read.token_bytes(entry["bytes"], f"{what}'s bytes")
    if entry.get("token") is None:
        raise read.Malformed(f"{what} has neither bytes nor a token")
    return read.token(entry["token"], f"{what}'s token").encode()


def engine_entries(choice: Any) -> list[Any]:
    """The chat-style entries of one engine choice (none when logprobs were not asked for)."""
    return read.items(read.obj(read.obj(choice, "a choice").get("logprobs"), "logprobs").get("content"),
                      "logprobs.content")


def token_text(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


class Offsets:
    """Character offsets of consecutive tokens in a text that starts `start` characters in."""

    def __init__(self, start: int = 0) -> None:
        self._chars = start
        # Holds back an incomplete character until the token that completes it arrives.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def next(self, raw: bytes) -> int:
        """The offset of the token `raw`, which then counts as read."""
        offset = self._chars
        self._chars += len(self._decoder.decode(raw))
        return offset


def legacy(tokens: Iterable[TokenLogprob], top: int, offsets: Offsets) -> dict[str, Any]:
    """The legacy shape of `tokens`, keeping at most `top` alternatives per token."""
    out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for token in tokens:
        out["tokens"].append(token_text(token.raw))
        out["token_logprobs"].append(token.logprob)
        if token.top is None:
            out["top_logprobs"].append(None)
        else:
            out["top_logprobs"].append(with_sampled(token_text(token.raw), token.logprob,
                                                    ((token_text(raw), logprob) for raw, logprob in token.top[:top])))
        out["text_offset"].append(offsets.next(token.raw))
    return out


def with_sampled(token: str, logprob: float | None, alternatives: Iterable[tuple[str, float]]) -> dict[str, float]:
    """A token's `top_logprobs` entry as OpenAI gives it: the alternatives, and always the token
    itself with its own logprob (so `logprobs + 1` entries when it is not among the top ones, and
    itself alone for `logprobs: 0`). Evaluation harnesses read it to tell a greedy token."""
    entry: dict[str, float] = {}
    for text, value in alternatives:
        entry.setdefault(text, value)
    if logprob is not None:
        entry[token] = logprob  # the value of token_logprobs, whatever the alternatives said
    return entry


def concat(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two consecutive legacy pieces of one choice (the echoed prompt, then the completion)."""
    return {key: first[key] + second[key] for key in first}


# -- chat ------------------------------------------------------------------------------------------
# OpenAI's chat gives every token of a choice its entry (token, logprob, bytes) once `logprobs: true`,
# with `top_logprobs` alternatives each: none when it is absent or 0. llama.cpp's engine (the
# embedded model's, and its OpenAI-compatible server) gives alternatives of its own choosing when
# it is absent, and no entries at all for 0: it is asked for at least one (`engine_alternatives`),
# and what it gives is cut back to what was asked (`as_asked`).


def chat_alternatives(parameters: Mapping[str, Any]) -> int | None:
    """The alternatives per token a chat call asks for: None without `logprobs: true`, else
    `top_logprobs`, 0 when it is absent."""
    if parameters.get("logprobs") is not True:
        return None
    return parameters.get("top_logprobs") or 0


def engine_alternatives(asked: int) -> int:
    """What an engine that reads `top_logprobs: 0` (or none) as "no entries" is asked for."""
    return max(asked, 1)


def as_asked(choices: Iterable[Any], asked: int | None) -> None:
    """Chat choices' (or a stream's pieces') logprobs as OpenAI gives them for `asked`
    (chat_alternatives): none when they were not asked for, at most `asked` alternatives a token."""
    for choice in choices:
        logprobs = choice.logprobs
        if logprobs is None:
            continue
        if asked is None:
            choice.logprobs = None
            continue
        for entries in logprobs.values():
            for entry in entries or ():
                if len(entry["top_logprobs"]) > asked:
                    entry["top_logprobs"] = entry["top_logprobs"][:asked]
