"""One endpoint's translator run in-process, for the property tests of each protocol's translators
(tests/unit/test_<protocol>_translators.py): an HTTP protocol's translator sends through
httpx.MockTransport (fakes/httpx_client.py) to a handler that records each request and answers it
with the vendor's body or event stream; the embedded model's talks to a scripted stand-in for its
engine. Then what the client reads of the translator's answer: the endpoint's own writer
(endpoints/<name>/answer.py), parsed by the contract's generated models."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from hypothesis import strategies as st

from gateway.core.completion import Chunk, Result, Usage
from gateway.core.config import Settings, VendorConfig
from gateway.core.endpoint import Endpoint
from gateway.endpoints.chat import answer as chat_answer
from gateway.endpoints.completions import answer as completions_answer
from gateway.vendors import registry
from gateway.vendors.local.adapter import LocalAdapter
from gateway.vendors.local.engine import EngineOptions
from gateway.vendors.local.model import LocalOptions
from gateway.endpoints.usage import usage_body
from generated.models import ChatCompletion, ChatCompletionChunk, Completion, CompletionChunk
from tests.support.fakes.httpx_client import answered_by

# A function's name as the contract takes it, and a stop as a client may send it: one or several.
NAME = st.from_regex(r"[a-zA-Z0-9_-]{1,64}", fullmatch=True)
STOP = st.one_of(st.text(min_size=1, max_size=8), st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4))


@st.composite
def chat_parameters(draw: Callable[[Any], Any], temperature_max: float = 2) -> dict[str, Any]:
    """A chat request's parameters, as the unit hands them on (the fields set, not null), with a
    temperature within the protocol's range (the planner refuses more)."""
    parameters: dict[str, Any] = {}
    if draw(st.booleans()):
        parameters[draw(st.sampled_from(["max_tokens", "max_completion_tokens"]))] = draw(st.integers(1, 4096))
    if draw(st.booleans()):
        parameters["stop"] = draw(STOP)
    if draw(st.booleans()):
        parameters["temperature"] = draw(st.floats(0, temperature_max))
    if draw(st.booleans()):
        names = draw(st.lists(NAME, min_size=1, max_size=3, unique=True))
        parameters["tools"] = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
                               for name in names]
        choice = draw(st.sampled_from(["none", "auto", "required", "named", None]))
        if choice == "named":
            parameters["tool_choice"] = {"type": "function", "function": {"name": draw(st.sampled_from(names))}}
        elif choice is not None:
            parameters["tool_choice"] = choice
    return parameters


SETTINGS = Settings()
HEAD = {"id": "x-1", "created": 1, "model": "vendor/model"}


@dataclass
class Sent:
    """One request the vendor got: its URL, headers and JSON body."""

    url: httpx.URL
    headers: httpx.Headers
    body: Any


def sse(events: list[Any], named: bool = False) -> bytes:
    """A server-sent event stream of `events` (JSON), each named by its `type` when `named`
    (Anthropic's), then OpenAI's `[DONE]` unless named."""
    out = b""
    for event in events:
        name = f"event: {event['type']}\n".encode() if named else b""
        out += name + b"data: " + orjson.dumps(event) + b"\n\n"
    return out if named else out + b"data: [DONE]\n\n"


async def _http(protocol: str, endpoint: Endpoint, call: Any, answer: Any, options: dict[str, Any],
                stream: bool) -> tuple[list[Sent], Any]:
    sent: list[Sent] = []

    def vendor(request: httpx.Request) -> httpx.Response:
        sent.append(Sent(request.url, request.headers, orjson.loads(request.content)))
        if stream:
            return httpx.Response(200, content=answer, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=answer)

    config = VendorConfig(name=protocol, protocol=protocol, base_url="http://vendor.test", api_key="sk-test",
                          options=options)
    adapter = registry.build(config, SETTINGS)
    adapter.use_clients(answered_by(vendor))
    translator = adapter.translators[endpoint]
    try:
        if stream:
            return sent, [chunk async for read in translator.stream(call) for chunk in read]
        return sent, await translator.complete(call)
    finally:
        await adapter.close()


def run_http(protocol: str, endpoint: Endpoint, call: Any, answer: Any, options: dict[str, Any] | None = None,
             ) -> tuple[list[Sent], Any]:
    """The requests `protocol`'s translator of `endpoint` sent for `call` and what it read of
    `answer` (a JSON body; for a streamed call, the stream's bytes): a Result, or every Chunk."""
    return asyncio.run(_http(protocol, endpoint, call, answer, options or {}, bool(call.stream)))


class ScriptedEngine:
    """Stands in for llama.cpp's engine: records each request and answers it with the chunks
    `script(body)` gives (OpenAI's stream chunks, as the engine yields them)."""

    def __init__(self, script: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> None:
        self.options = EngineOptions(model_path="model.gguf", alias="smollm2-135m", parallel=2, context_size=512,
                                     threads=None, quiet=True)
        self.vocab_size = 1000
        self.start_token = 1
        self.bodies: list[dict[str, Any]] = []
        self._script = script

    def load(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def tokenize(self, text: str) -> list[tuple[int, bytes]]:
        return [(i, word.encode()) for i, word in enumerate(text.split(" "))]

    async def generate(self, body: dict[str, Any], chat: bool = False) -> AsyncIterator[dict[str, Any]]:
        self.bodies.append(body)
        for chunk in self._script(body):
            yield chunk


async def _local(endpoint: Endpoint, call: Any, engine: ScriptedEngine) -> Any:
    adapter = LocalAdapter(VendorConfig(name="local", protocol="local"), LocalOptions(), SETTINGS,
                           engine=engine)  # type: ignore[arg-type]
    await adapter.start()
    while adapter.not_ready():  # the stand-in loads at once, on a worker thread
        await asyncio.sleep(0)
    translator = adapter.translators[endpoint]
    call = dataclasses.replace(call, model=engine.options.alias)
    try:
        if call.stream:
            return [chunk async for read in translator.stream(call) for chunk in read]
        return await translator.complete(call)
    finally:
        await adapter.close()


def run_local(endpoint: Endpoint, call: Any, script: Callable[[dict[str, Any]], list[dict[str, Any]]],
              ) -> tuple[list[dict[str, Any]], Any]:
    """The engine requests the embedded model's translator of `endpoint` made for `call`, and what
    it read of the chunks `script` answered each with."""
    engine = ScriptedEngine(script)
    return engine.bodies, asyncio.run(_local(endpoint, call, engine))


def client_chat(result: Result) -> ChatCompletion:
    """The chat answer a client reads of `result`, as the contract's model (a ValidationError when
    the answer breaks the contract)."""
    assert result.usage is not None
    return ChatCompletion.model_validate_json(chat_answer.body(HEAD | {"object": "chat.completion"}, result,
                                                               result.usage))


def client_completion(result: Result) -> Completion:
    """The completion a client reads of `result`, as the contract's model."""
    assert result.usage is not None
    return Completion.model_validate_json(completions_answer.body(HEAD | {"object": "text_completion"}, result,
                                                                  result.usage))


def client_stream(endpoint: Endpoint, chunks: list[Chunk]) -> list[ChatCompletionChunk | CompletionChunk]:
    """The chunks a client reads of a stream's `chunks`: each one's choices written in the
    endpoint's shape (endpoints/<name>/answer.py), parsed by the contract's chunk model."""
    chat = endpoint is Endpoint.CHAT
    shape: Any = chat_answer.Shape() if chat else completions_answer.SHAPE
    model: Any = ChatCompletionChunk if chat else CompletionChunk
    read = []
    for chunk in chunks:
        pieces = [p for c in chunk.choices if (p := shape.piece(c, c.finish_reason)) is not None]
        body = HEAD | {"object": "chat.completion.chunk" if chat else "text_completion", "choices": pieces}
        if chunk.usage is not None:
            body["usage"] = usage_body(chunk.usage)
        read.append(model.model_validate_json(orjson.dumps(body)))
    return read


def finishes_read(read: list[Any]) -> dict[int, list[str]]:
    """The finish reasons a client read per choice (one each, when the stream is whole)."""
    found: dict[int, list[str]] = {}
    for chunk in read:
        for choice in chunk.choices:
            if choice.finish_reason is not None:
                found.setdefault(choice.index, []).append(choice.finish_reason)
    return found


def joined(chunks: list[Chunk]) -> tuple[dict[int, str], dict[int, str | None], Usage | None]:
    """A stream's text and last finish reason per choice, and its usage."""
    text: dict[int, str] = {}
    finish: dict[int, str | None] = {}
    usage = None
    for chunk in chunks:
        for choice in chunk.choices:
            text[choice.index] = text.get(choice.index, "") + choice.text
            finish[choice.index] = choice.finish_reason or finish.get(choice.index)
        usage = chunk.usage or usage
    return text, finish, usage
