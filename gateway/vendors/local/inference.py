"""POST /v5/inference on the embedded model: llama.cpp's native `/completion` body (`prompt`,
`n_predict`, `temperature`, `stream`...), served in process, answered as llama.cpp's server answers
`/completion`.

The engine (vendors/local/engine.py) runs llama.cpp's server code, whose completion handler reads
the native parameters (`n_predict`, `n_probs`, `grammar`, `json_schema`...) as the server's
`/completion` does, but answers in OpenAI's completion shape. So the body goes in as the client
wrote it, and the answer comes back in `/completion`'s own: `content`, `stop`, `stop_type`,
`tokens_evaluated`, `tokens_predicted`, `timings`; a stream's events `{"content", "stop": false}`,
then one with `stop: true` and the counts. A client's `json_schema` is held to the gateway's bounds on
client schemas first (core/client_schemas.py: the gateway fetches nothing a schema names; 422).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from gateway.core import client_schemas
from gateway.core.completion import Chunk, Result
from gateway.core.errors import ValidationFailed
from gateway.core.inference import InferenceCall, NativeChoice
from gateway.vendors import untrusted as read
from gateway.vendors.local.engine import EngineError
from gateway.vendors.local.model import Embedded

# The engine's finish reasons as /completion's `stop_type`.
_STOP_TYPES = {"length": "limit", "stop": "eos"}
# The members the engine sets itself: one prompt per call, always streamed to the gateway.
_ENGINES = ("stream",)


class LocalInference:
    def __init__(self, adapter: Embedded) -> None:
        self._adapter = adapter

    async def complete(self, call: InferenceCall) -> Result:
        pieces: list[str] = []
        last: dict[str, Any] = {}
        async for event in self._events(call):
            pieces.append(event["content"])
            last = event
        return Result([NativeChoice(0, "", raw={**last, "content": "".join(pieces)})])

    async def stream(self, call: InferenceCall) -> AsyncIterator[list[Chunk]]:
        async for event in self._events(call):
            yield [Chunk([NativeChoice(0, "", raw=event)])]

    async def _events(self, call: InferenceCall) -> AsyncIterator[dict[str, Any]]:
        """/completion's stream events for the call, the last with `stop: true` and the counts."""
        adapter = self._adapter
        adapter._ready(call.model)
        body = {name: value for name, value in call.body.items() if name not in _ENGINES}
        if (refused := _unserved(body)) is not None:
            raise adapter._invalid(*refused)
        _check_schema(body)
        await call.clearance.wait()  # the request's limits let it go (core/clearance.py)
        started = time.perf_counter()
        call.served_by.append(adapter.name)
        try:
            async with aclosing(adapter._engine.generate(body)) as chunks:
                async for chunk in chunks:
                    try:
                        event = _event(chunk, adapter.model, bool(body.get("stop")))
                    except read.READ_ERRORS as exc:
                        raise EngineError(f"malformed engine answer: {read.why(exc)}") from None
                    if event is not None:
                        yield event
                        if event["stop"]:
                            return
        except EngineError as exc:
            raise adapter._error(exc) from None
        raise adapter._error(EngineError(f"the engine ended without a last chunk after "
                                         f"{time.perf_counter() - started:.1f} s"))


def _event(chunk: dict[str, Any], model: str, has_stop_words: bool) -> dict[str, Any] | None:
    choices = read.items(chunk.get("choices"), "choices")
    choice = read.obj(choices[0], "a choice") if choices else {}
    text = choice.get("text") or ""
    if not isinstance(text, str):
        raise read.Malformed("a choice's text is not a string")
    finish = choice.get("finish_reason")
    if finish is None:
        return {"content": text, "stop": False} if text else None
    usage = read.obj(chunk.get("usage"), "usage")
    timings = read.obj(chunk.get("timings"), "timings")
    stop_type = "word" if finish == "stop" and has_stop_words else _STOP_TYPES.get(finish, "eos")
    event: dict[str, Any] = {"content": text, "stop": True, "model": model, "stop_type": stop_type,
                             "tokens_evaluated": read.count(usage.get("prompt_tokens"), "usage.prompt_tokens"),
                             "tokens_predicted": read.count(usage.get("completion_tokens"), "usage.completion_tokens"),
                             "truncated": False}
    if timings:
        event["timings"] = timings
    return event


# Members whose answer /completion would carry but the engine's completion handler gives in another
# shape (token probabilities, token ids): refused by name rather than answered without them.
_UNSERVED = {"n_probs": "token probabilities", "return_tokens": "token ids",
             "post_sampling_probs": "token probabilities"}


def _unserved(body: dict[str, Any]) -> tuple[str, str] | None:
    """What the embedded model cannot answer in /completion's shape: (the member, why), or None."""
    for name, what in _UNSERVED.items():
        if body.get(name):
            return f"args.{name}", f"the embedded model's /completion answer carries no {what}: leave `{name}` out"
    prompt = body.get("prompt")
    if isinstance(prompt, list) and any(isinstance(p, str | list) for p in prompt):
        return "args.prompt", "the embedded model takes one prompt per request (a string, or a list of token ids)"
    return None


def _check_schema(body: dict[str, Any]) -> None:
    """A `json_schema` in args is a client's schema like chat's response_format (core/client_schemas.py)."""
    if "json_schema" not in body:
        return
    found = list(client_schemas.problems([(("args", "json_schema"), body["json_schema"], False)]))
    if found:
        raise ValidationFailed.in_body(found)
