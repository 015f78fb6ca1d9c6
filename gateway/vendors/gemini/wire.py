"""What Google's Gemini API (`models/{model}:generateContent`, `:streamGenerateContent?alt=sse`) is on
the wire for both of the gateway's endpoints: its URLs, seeds, finish reasons and usage, and the
reading of GenerateContentResponse objects, whole or one per stream event, into choices.
vendors/gemini/completions.py serves completions over it and vendors/gemini/chat.py chat; they differ only in
what a candidate's parts and logprobs become (`Reader.choice`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson
from pydantic import BaseModel, ConfigDict, PositiveInt

from gateway.core.completion import Choice, Chunk, Result, Usage
from gateway.core.errors import VendorFailed
from gateway.vendors import untrusted as read
from gateway.vendors.transport.sse_reader import Event

MAX_STOP = 5  # GenerationConfig.stopSequences: "up to 5"
FILTERED = "content_filter"
FINISH = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": FILTERED,
    "RECITATION": FILTERED,
    "LANGUAGE": FILTERED,
    "BLOCKLIST": FILTERED,
    "PROHIBITED_CONTENT": FILTERED,
    "SPII": FILTERED,
    "IMAGE_SAFETY": FILTERED,
}


class GeminiOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # candidateCount per call: the limit differs per model (Gemini 2.5 takes up to 8, others 1).
    max_candidates: PositiveInt = 1


def headers(key: str) -> dict[str, str]:
    return {"x-goog-api-key": key}


def url(model: str, method: str) -> str:
    return f"/models/{quote(model.removeprefix('models/'), safe='')}:{method}"


def int32_seed(seed: int) -> int:
    """The contract's int64 seed (and a fanned-out choice's seed + i, which may go beyond it) in
    Gemini's int32 `seed`, wrapped as two's complement: a seed already in range is sent as it is,
    and every seed maps to the same int32 each time."""
    return (seed + 2**31) % 2**32 - 2**31


class Reader:
    """GenerateContentResponse objects (one, or one per stream event) as choices and usage;
    untrusted.Malformed for one that is not (a candidate index beyond the candidates asked for,
    more candidates than asked for). What a candidate becomes is `choice`, each endpoint's own."""

    blocked: type[Choice] = Choice  # what a blocked prompt's choices are

    def __init__(self, n: int) -> None:
        self._n = n
        self._finished: set[int] = set()
        self.usage: Usage | None = None

    @property
    def finished_all(self) -> bool:
        return len(self._finished) == self._n

    def read(self, response: Any) -> list[Choice]:
        response = read.obj(response, "a response")
        if (metadata := response.get("usageMetadata")) is not None:
            self.usage = usage(read.obj(metadata, "usageMetadata"))
        candidates = read.items(response.get("candidates"), "candidates")
        if len(candidates) > self._n:
            raise read.Malformed(f"{len(candidates)} candidates for a call that asked for {self._n}")
        feedback = read.obj(response.get("promptFeedback"), "promptFeedback")
        if not candidates and feedback.get("blockReason"):
            # The prompt was blocked: no candidate at all.
            self._finished.update(range(self._n))
            return [self.blocked(i, "", FILTERED) for i in range(self._n)]
        choices = []
        for position, raw in enumerate(candidates):
            candidate = read.obj(raw, "a candidate")
            index = read.index(candidate.get("index", position), "a candidate's index", self._n)
            parts = [read.obj(part, "a part")
                     for part in read.items(read.obj(candidate.get("content"), "content").get("parts"), "parts")]
            finish = read.text(candidate.get("finishReason"), "finishReason")
            choices.append(self.choice(index, parts, finish, candidate))
            if finish:
                self._finished.add(index)
        return choices

    def choice(self, index: int, parts: list[dict[str, Any]], finish: str, candidate: dict[str, Any]) -> Choice:
        raise NotImplementedError


def answer(vendor: str, reader: Reader, data: Any) -> Result:
    """A non-streamed answer read whole (a candidate without a finish reason stopped)."""
    try:
        choices = reader.read(data)
    except read.READ_ERRORS as exc:
        raise VendorFailed(f"vendor '{vendor}' sent a malformed answer: {read.why(exc)}", vendor=vendor) from None
    for choice in choices:
        choice.finish_reason = choice.finish_reason or "stop"
    return Result(choices, reader.usage)


def answer_text(parts: list[dict[str, Any]]) -> str:
    """A candidate's text: its parts' that are not thoughts."""
    return "".join(read.text(part.get("text"), "a part's text") for part in parts if not part.get("thought"))


def finish_reason(finish: str) -> str | None:
    return FINISH.get(finish, "stop") if finish else None


class Stream:
    """One try's stream (vendors/transport/answers.py `StreamDecoder`). It has no end marker of its own: it
    ends with the body, well once every candidate has finished; the usage goes out last."""

    __slots__ = ("_name", "_reader")

    def __init__(self, name: str, reader: Reader) -> None:
        self._name = name
        self._reader = reader

    def read(self, batch: list[Event]) -> tuple[list[Chunk], bool, VendorFailed | None]:
        chunks: list[Chunk] = []
        for sse in batch:
            try:
                choices = self._reader.read(orjson.loads(sse.data))
            except read.READ_ERRORS as exc:
                return chunks, False, VendorFailed(
                    f"vendor '{self._name}' sent a malformed stream chunk: {read.why(exc)}", vendor=self._name)
            if choices:
                chunks.append(Chunk(choices))
        return chunks, False, None

    def end(self) -> list[Chunk]:
        if not self._reader.finished_all:
            raise VendorFailed(f"vendor '{self._name}' ended the stream before every candidate finished",
                               vendor=self._name)
        return [Chunk([], self._reader.usage)]


def top_candidates(step: dict[str, Any], top: int) -> list[tuple[str, float]]:
    """A logprobsResult step's likeliest tokens, at most `top` of them."""
    alternatives = []
    for raw in read.items(step.get("candidates"), "candidates")[: min(top, read.MAX_ALTERNATIVES)]:
        candidate = read.obj(raw, "a top candidate")
        alternatives.append((read.token(candidate.get("token"), "a top candidate's token"),
                             read.logprob(candidate.get("logProbability", 0.0), "logProbability")))
    return alternatives


def chosen_and_top(result: dict[str, Any]) -> tuple[list[tuple[str, float]], list[dict[str, Any]]]:
    """A logprobsResult's chosen tokens with their logprobs, and its steps of top candidates."""
    chosen = [read.obj(c, "a chosen candidate")
              for c in read.items(result.get("chosenCandidates"), "chosenCandidates")]
    top = [read.obj(step, "a top candidates step")
           for step in read.items(result.get("topCandidates"), "topCandidates")]
    return [(read.token(c.get("token"), "a chosen candidate's token"),
             read.logprob(c.get("logProbability", 0.0), "logProbability")) for c in chosen], top


def usage(raw: dict[str, Any]) -> Usage:
    """promptTokenCount includes cached content; thoughts are output the model was billed for."""
    thoughts = read.count(raw.get("thoughtsTokenCount"), "usageMetadata.thoughtsTokenCount")
    return read.usage(
        read.count(raw.get("promptTokenCount"), "usageMetadata.promptTokenCount"),
        read.count(raw.get("candidatesTokenCount"), "usageMetadata.candidatesTokenCount") + thoughts,
        "usageMetadata",
        {"cached_tokens": read.count(raw.get("cachedContentTokenCount"), "usageMetadata.cachedContentTokenCount")},
        {"reasoning_tokens": thoughts} if thoughts else None,
    )
