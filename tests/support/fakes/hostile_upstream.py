"""A hostile OpenAI-compatible `/v1/completions` server: each model name is one way a vendor's bytes
can be nonsense. Answers not named below are the well-behaved fake's (tests/support/fakes/openai_upstream.py).
Streamed, a fault comes after one good text chunk (so the gateway's answer has started), unless
it is in the usage, which comes last anyway.

  usage-<case>        usage whose prompt_tokens (or details) are: 1e30 (10**30), 3e9, negative (-5),
                      fraction (12.5), whole-float (12.0, accepted), key (the Authorization header,
                      a string), details-junk (null / text / object details, dropped),
                      details-huge (reasoning_tokens 10**30)
  logprobs-<case>     chat-style (llama.cpp) or legacy logprobs with: bytes-<N> (`bytes` the integer
                      N), positive (logprob 5.0), legacy-junk (tokens that are numbers), big (a
                      legitimate 3000-token answer with 5 alternatives each, legacy shape)
  index-<case>        a choice index: huge (10**18), negative (-1), beyond (n x prompts), key (the
                      Authorization header)
  retry-<case>        429 with Retry-After: inf, minus-inf, nan, 1e308, junk ("soon"), past-date and
                      far-date (IMF-fixdate), obsolete-date (RFC 850), asctime-date
  leak-<case>         the Authorization header quoted back: error-json (500, JSON message),
                      error-text (500, plain text where the key straddles the gateway's clip),
                      reject (400), stream-error (an OpenAI `data: {"error"}` event mid-stream),
                      first-error (that event first), malformed (choices is the key), not-json
                      (a 200 body that is the key)
  endless-line        a stream whose first line never ends (sent until the client leaves)
  huge-body           a 200 JSON answer padded without end (chunked; sent until the client leaves)
  huge-length         a 200 answer declaring a Content-Length of 1 TB, then waiting
  word-<n>mb          streams one word of n MiB that never repeats (`word(n)`), in 1 MiB pieces, without usage
  reject-400          400, as for a prompt the vendor finds too long
  fail-500            500 without usage, as a vendor that broke on what it was sent
  slow                never answers a non-streamed request; waits for the client to leave

`log` records each request served: its model, bytes of body sent, and whether the client (the
gateway) left before the fake was done; `waiting` counts `slow` requests now held open.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import string
from dataclasses import dataclass
from typing import Any

from tests.support.fakes.openai_upstream import completion, stream_events

RETRY_AFTER = {
    "inf": "inf", "minus-inf": "-inf", "nan": "nan", "1e308": "1e308", "junk": "soon",
    "past-date": "Wed, 21 Oct 2015 07:28:00 GMT", "far-date": "Fri, 01 Jan 2100 00:00:00 GMT",
    "obsolete-date": "Sunday, 06-Nov-94 08:49:37 GMT", "asctime-date": "Sun Nov  6 08:49:37 1994",
}  # fmt: skip
BAD_USAGE: dict[str, Any] = {"1e30": 10**30, "3e9": 3 * 10**9, "negative": -5, "fraction": 12.5, "whole-float": 12.0}
BAD_INDEX: dict[str, Any] = {"huge": 10**18, "negative": -1}
PIECE = 64 << 10  # bytes per body message of the endless answers
MIB = 1 << 20


@functools.cache
def word(mib: int) -> str:
    """One word of `mib` MiB of letters that never repeats: a tokenizer gets no help from caching
    repeated pieces, as it would from a run of one letter."""
    return "".join(random.Random(mib).choices(string.ascii_letters, k=mib * MIB))


@dataclass
class Served:
    model: str
    sent: int = 0  # bytes of body sent
    client_left: bool = False  # the gateway closed the connection before the fake was done
    ended: bool = False


class HostileOpenAI:
    def __init__(self) -> None:
        self.log: list[Served] = []
        self.waiting = 0

    def served(self, model: str) -> Served:
        """The last request served for `model`."""
        return next(s for s in reversed(self.log) if s.model == model)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        headers, raw = await _read(receive, scope)
        request = json.loads(raw)
        key = headers.get("authorization", "").removeprefix("Bearer ")
        served = Served(request["model"])
        self.log.append(served)
        gone = asyncio.Event()
        watcher = asyncio.create_task(_watch(receive, gone))
        try:
            await self._answer(send, request, key, served, gone)
        finally:
            served.client_left = gone.is_set()
            served.ended = True
            watcher.cancel()

    async def _answer(self, send, request: dict[str, Any], key: str, served: Served, gone: asyncio.Event) -> None:
        model = request["model"]
        family, _, case = model.partition("-")
        if family == "retry":
            await _json(send, 429, {"error": {"message": "slow down"}}, [(b"retry-after", RETRY_AFTER[case].encode())])
        elif model == "reject-400":
            await _json(send, 400, {"error": {"message": "this prompt is too long for the model"}})
        elif model == "fail-500":
            await _json(send, 500, {"error": {"message": "the model server broke"}})
        elif model in ("leak-error-json", "leak-reject"):
            status = 500 if model == "leak-error-json" else 400
            await _json(send, status, {"error": {"message": f"bad credentials: Authorization: Bearer {key}"}})
        elif model == "leak-error-text":  # the second key starts 10 characters before a 500-character clip
            head = f"{key} failed. "
            await _raw(send, 500, f"{head}{'.' * (490 - len(head))}{key} and more".encode(), b"text/plain")
        elif model == "leak-not-json":
            await _raw(send, 200, f"not JSON: {key}".encode(), b"application/json")
        elif model == "slow":
            self.waiting += 1
            try:
                await gone.wait()  # a real vendor would answer some day; this one only sees the client leave
            finally:
                self.waiting -= 1
        elif model in ("endless-line", "huge-body", "huge-length"):
            await _endless(send, model, served, gone)
        elif request.get("stream"):
            await _stream(send, request, key, served)
        else:
            served.sent = await _json(send, 200, _answer(request, key))


async def _stream(send, request: dict[str, Any], key: str, served: Served) -> None:
    model = request["model"]
    events = list(stream_events(request, with_usage=True))
    last = json.loads(events[-1])
    text_events = events[:-1] if last.get("usage") else events
    if model.startswith("word-"):
        text = word(int(model.removeprefix("word-").removesuffix("mb")))
        head = {"id": "cmpl-hostile", "object": "text_completion", "created": 1, "model": model}
        events = [json.dumps(head | {"choices": [{"index": 0, "text": text[i:i + MIB], "finish_reason": None}]})
                  for i in range(0, len(text), MIB)]
        events.append(json.dumps(head | {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
    elif model.startswith("usage-"):
        assert last.get("usage"), "the gateway always asks for stream_options.include_usage"
        last["usage"] = _usage(last["usage"], model.removeprefix("usage-"), key)
        events = [*text_events, json.dumps(last)]
    elif model == "leak-first-error":
        events = [json.dumps({"error": {"message": f"failed; key {key}", "type": "server_error"}})]
    elif model != "ok":
        bad = json.loads(text_events[0])
        if model == "leak-stream-error":
            bad = {"error": {"message": f"upstream broke; Authorization: Bearer {key}", "type": "server_error"}}
        else:
            bad["choices"] = _answer(request, key)["choices"]
        events = [text_events[0], json.dumps(bad), *events[1:]]
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    for data in events:
        body = f"data: {data}\n\n".encode()
        await send({"type": "http.response.body", "body": body, "more_body": True})
        served.sent += len(body)
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


async def _endless(send, model: str, served: Served, gone: asyncio.Event) -> None:
    if model == "endless-line":
        head, start, filler = [(b"content-type", b"text/event-stream")], b"data: ", b"a" * PIECE
    else:
        head, start, filler = [(b"content-type", b"application/json")], b'{"choices": [], "pad": "', b" " * PIECE
        if model == "huge-length":
            head.append((b"content-length", str(10**12).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": head})
    piece = start + filler
    while not gone.is_set():
        await send({"type": "http.response.body", "body": piece, "more_body": True})
        served.sent += len(piece)
        piece = filler
        if model == "huge-length":
            await gone.wait()  # the declared length alone must be enough to refuse the answer
        await asyncio.sleep(0)  # lets the disconnect be seen


def _answer(request: dict[str, Any], key: str) -> dict[str, Any]:
    """A non-streamed answer carrying the model's fault (the `choices` of a streamed one too)."""
    model = request["model"]
    body = completion(request)
    family, _, case = model.partition("-")
    choice = body["choices"][0]
    if family == "usage":
        body["usage"] = _usage(body["usage"], case, key)
    elif family == "index":
        choice["index"] = {**BAD_INDEX, "beyond": len(body["choices"]), "key": key}[case]
    elif model == "logprobs-big":
        tokens = [f" w{k}" for k in range(3000)]
        top = [{t: -0.5, **{f" alt{j}": -1.5 - j for j in range(4)}} for t in tokens]
        choice |= {"text": "".join(tokens), "logprobs": {"tokens": tokens, "token_logprobs": [-0.5] * len(tokens),
                                                         "top_logprobs": top, "text_offset": _offsets(tokens)}}
    elif family == "logprobs":
        choice["logprobs"] = _bad_logprobs(case, choice["text"])
    elif model == "leak-malformed":
        body["choices"] = f"Bearer {key}"
    return body


def _offsets(tokens: list[str]) -> list[int]:
    offsets, at = [], 0
    for token in tokens:
        offsets.append(at)
        at += len(token)
    return offsets


def _usage(usage: dict[str, Any], case: str, key: str) -> dict[str, Any]:
    if case in BAD_USAGE:
        return usage | {"prompt_tokens": BAD_USAGE[case]}
    if case == "key":
        return usage | {"prompt_tokens": key}
    if case == "details-junk":
        return usage | {"prompt_tokens_details": {"cached_tokens": None, "audio_tokens": "many", "x": {"y": 1}}}
    if case == "details-huge":
        return usage | {"completion_tokens_details": {"reasoning_tokens": 10**30}}
    raise ValueError(f"no usage case {case!r}")


def _bad_logprobs(case: str, text: str) -> dict[str, Any]:
    if case.startswith("bytes-"):  # llama.cpp's chat-style entries, with `bytes` a bare integer
        return {"content": [{"id": 1, "token": text, "bytes": int(case.removeprefix("bytes-")), "logprob": -0.1,
                             "top_logprobs": []}]}
    if case == "positive":
        return {"content": [{"id": 1, "token": text, "bytes": list(text.encode()), "logprob": 5.0, "top_logprobs": []}]}
    if case == "legacy-junk":
        return {"tokens": [1, 2], "token_logprobs": [-0.1, -0.2], "top_logprobs": [None, None], "text_offset": [0, 1]}
    raise ValueError(f"no logprobs case {case!r}")


async def _read(receive, scope) -> tuple[dict[str, str], bytes]:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    return {k.decode(): v.decode() for k, v in scope["headers"]}, body


async def _watch(receive, gone: asyncio.Event) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.set()


async def _json(send, status: int, body: Any, extra_headers=()) -> int:
    data = json.dumps(body).encode()
    await _raw(send, status, data, b"application/json", extra_headers)
    return len(data)


async def _raw(send, status: int, body: bytes, content_type: bytes, extra_headers=()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                            *extra_headers]})
    await send({"type": "http.response.body", "body": body})
