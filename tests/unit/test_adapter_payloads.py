"""Every parameter an adapter declares native reaches the vendor's wire, and no other does.

In-process and fast: the HTTP adapters send through httpx.MockTransport to a handler that records
each request and answers in the vendor's shape; the embedded model's adapter talks to a recording
stand-in for its engine. The real-HTTP tests (test_capabilities.py, the vendor tests) check the
same against fakes that validate each vendor's wire contract."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import httpx
import orjson
import pytest

from gateway.core.endpoint import Endpoint
from gateway.core.clearance import Clearance, Withheld
from gateway.core.completion import CompletionCall, Result
from gateway.core.config import Settings, VendorConfig
from gateway.core.parameters import NATIVE, PARAMETERS
from gateway.vendors import registry
from gateway.vendors.local.adapter import LocalAdapter
from gateway.vendors.local.engine import engine_seed
from gateway.vendors.local.engine import EngineOptions
from gateway.vendors.local.model import LocalOptions
from gateway.vendors.logprobs import TokenLogprob
from tests.support.bodies import contains
from tests.support.fakes.httpx_client import answered_by

SETTINGS = Settings()
# A value other than the default for every parameter (`prompt`: a list of several).
VALUES: dict[str, Any] = {
    "prompt": ["first prompt", "second prompt"],
    "best_of": 3,
    "echo": True,
    "frequency_penalty": 0.5,
    "logit_bias": {"50": -100},
    "logprobs": 2,
    "max_tokens": 7,
    "n": 2,
    "presence_penalty": 0.25,
    "seed": 42,
    "stop": ["\n\n"],
    "suffix": "and then",
    "temperature": 0.3,
    "top_p": 0.9,
    "user": "user-1234",
}
assert set(VALUES) == set(PARAMETERS), "give the new parameter an example value"

ANSWERS = {
    "openai": {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
               "choices": [{"index": 0, "text": " done", "finish_reason": "stop", "logprobs": None}],
               "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}},
    "anthropic": {"type": "message", "content": [{"type": "text", "text": " done"}], "stop_reason": "end_turn",
                  "usage": {"input_tokens": 3, "output_tokens": 1}},
    "gemini": {"candidates": [{"index": 0, "content": {"parts": [{"text": " done"}]}, "finishReason": "STOP"}],
               "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1}},
}
# Each HTTP protocol with options that make the most parameters native.
HTTP_VENDORS = {"openai": {}, "anthropic": {}, "gemini": {"max_candidates": 4}}


def call_with(name: str | None) -> CompletionCall:
    call = CompletionCall(model="m", prompts=["a prompt"])
    if name == "prompt":
        call.prompts = list(VALUES["prompt"])
    elif name is not None:
        setattr(call, name, VALUES[name])
    return call


async def sent_by(protocol: str, options: dict, call: CompletionCall) -> list[dict]:
    """The JSON bodies the adapter sent the vendor for `call`."""
    bodies: list[dict] = []

    def vendor(request: httpx.Request) -> httpx.Response:
        bodies.append(orjson.loads(request.content))
        return httpx.Response(200, json=ANSWERS[protocol])

    vendor_config = VendorConfig(name=protocol, protocol=protocol, base_url="http://vendor.test", api_key="sk-test",
                                 options=options)
    adapter = registry.build(vendor_config, SETTINGS)
    adapter.use_clients(answered_by(vendor))
    try:
        await adapter.translators[Endpoint.COMPLETIONS].complete(call)
    finally:
        await adapter.close()
    return bodies


HTTP_CASES = [
    (protocol, name, found.kind)
    for protocol, options in HTTP_VENDORS.items()
    for name, found in registry.PROTOCOLS[protocol].capabilities_of[Endpoint.COMPLETIONS](
        registry.PROTOCOLS[protocol].Options.model_validate(options)).items()
]


@pytest.mark.parametrize(("protocol", "name", "kind"), HTTP_CASES, ids=[f"{p}-{n}" for p, n, _ in HTTP_CASES])
def test_http_adapters_send_what_is_native_and_nothing_else(protocol, name, kind):
    options = HTTP_VENDORS[protocol]
    if name == "prompt" and kind != NATIVE:
        return  # the planner gives such a vendor one prompt per call (tests/unit/test_planner.py)
    (plain,) = asyncio.run(sent_by(protocol, options, call_with(None)))
    (body,) = asyncio.run(sent_by(protocol, options, call_with(name)))
    value = VALUES[name]
    if kind == NATIVE:
        assert body != plain and (contains(body, value) or contains(body, [value])), (name, body)
    else:
        assert body == plain, f"{name} is {kind} on {protocol} but changed what the vendor was sent: {body}"


def test_a_parameter_an_openai_compatible_server_lacks_is_never_sent():
    lacks = {"echo", "best_of", "user", "logprobs", "stop"}
    options = {"lacks": ",".join(sorted(lacks))}
    everything = dataclasses.replace(call_with(None), **{name: VALUES[name] for name in lacks})
    (body,) = asyncio.run(sent_by("openai", options, everything))
    assert lacks.isdisjoint(body), body
    assert body["prompt"] == "a prompt" and body["max_tokens"] == 16  # always sent: servers' defaults differ


class RecordingEngine:
    """Stands in for llama.cpp's engine: records each completion request it gets and answers it
    with one token, its logprob set by the request's seed (so best_of has something to rank)."""

    def __init__(self) -> None:
        self.options = EngineOptions(model_path="model.gguf", alias="smollm2-135m", parallel=2, context_size=512,
                                     threads=None, quiet=True)
        self.vocab_size = 1000
        self.bodies: list[dict] = []

    def load(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def tokenize(self, text: str) -> list[tuple[int, bytes]]:
        return [(i, word.encode()) for i, word in enumerate(text.split(" "))]

    async def score(self, ids: list[int], top: int) -> list[TokenLogprob]:
        return [TokenLogprob(b"w", -0.5, ((b"w", -0.5),)) for _ in ids[1:]]

    async def generate(self, body: dict):
        self.bodies.append(body)
        logprob = -float(body.get("seed", 0) % 7)
        entry = {"id": 1, "token": " done", "bytes": list(b" done"), "logprob": logprob,
                 "top_logprobs": [{"id": 1, "token": " done", "bytes": list(b" done"), "logprob": logprob}]}
        yield {"choices": [{"text": " done", "finish_reason": "stop",
                            "logprobs": {"content": [entry]} if "logprobs" in body else None}],
               "usage": {"prompt_tokens": 2, "completion_tokens": 1}}


async def local_run(call: CompletionCall) -> tuple[list[dict], Result]:
    engine = RecordingEngine()
    vendor = VendorConfig(name="local", protocol="local")
    adapter = LocalAdapter(vendor, LocalOptions(), SETTINGS, engine=engine)  # type: ignore[arg-type]
    await adapter.start()
    while adapter.not_ready():  # the stand-in loads at once, on a worker thread
        await asyncio.sleep(0)
    try:
        return engine.bodies, await adapter.translators[Endpoint.COMPLETIONS].complete(dataclasses.replace(call, model=engine.options.alias))
    finally:
        await adapter.close()


LOCAL_CASES = [(name, found.kind) for name, found in LocalAdapter.capabilities_of[Endpoint.COMPLETIONS](LocalOptions()).items()]


@pytest.mark.parametrize(("name", "kind"), LOCAL_CASES, ids=[n for n, _ in LOCAL_CASES])
def test_the_local_adapter_honours_what_is_native_and_sends_nothing_else(name, kind):
    """Native on `local` means the engine is asked for it, or the adapter does it around the engine
    (n and best_of as one engine request per candidate, echo by prepending the prompt)."""
    base = call_with(None)
    call = call_with(name)
    if name == "prompt":
        call.prompts = call.prompts[:1] + ["another"]  # the planner sends one prompt per call here
    plain_bodies, plain = asyncio.run(local_run(base))
    bodies, result = asyncio.run(local_run(call if name != "prompt" else base))
    observed = (bodies, [(c.text, c.logprobs) for c in result.choices])
    if kind == NATIVE:
        assert observed != (plain_bodies, [(c.text, c.logprobs) for c in plain.choices]), name
    else:
        assert bodies == plain_bodies, f"{name} is {kind} on local but reached the engine: {bodies}"
    assert all("user" not in body and "suffix" not in body for body in bodies)


def test_local_samples_choice_i_with_seed_plus_i_and_ranks_best_of_by_logprob():
    call = dataclasses.replace(call_with(None), n=2, best_of=4, seed=10, logprobs=0)
    bodies, result = asyncio.run(local_run(call))
    assert [body["seed"] for body in bodies] == [engine_seed(10 + i) for i in range(4)]
    # The stand-in's logprob is -(seed mod 7): seeds 10..13 score -3, -4, -5, -6; the best two win.
    assert [c.logprobs["token_logprobs"] for c in result.choices] == [[-3.0], [-4.0]]
    assert result.usage is not None and (result.usage.prompt_tokens, result.usage.completion_tokens) == (2, 4)


async def _refusing_gate() -> None:
    raise Withheld(RuntimeError("over the limit"))


def _reached(protocol: str, stream: bool) -> list:
    """What reached the vendor (the HTTP requests, the engine's requests and tokenizations) when
    the request's clearance is refused, streamed or not; Withheld must come out of the adapter."""
    reached: list = []

    async def run() -> None:
        if protocol == "local":
            engine = RecordingEngine()
            tokenize = engine.tokenize

            async def counted(text: str):
                reached.append(text)
                return await tokenize(text)

            engine.tokenize = counted  # type: ignore[method-assign]
            adapter: Any = LocalAdapter(VendorConfig(name="local", protocol="local"), LocalOptions(), SETTINGS,
                                        engine=engine)  # type: ignore[arg-type]
            await adapter.start()
            while adapter.not_ready():  # the stand-in loads at once, on a worker thread
                await asyncio.sleep(0)
            model = engine.options.alias
        else:
            adapter = registry.build(VendorConfig(name=protocol, protocol=protocol, base_url="http://vendor.test",
                                                  api_key="sk-test", options=HTTP_VENDORS[protocol]), SETTINGS)
            adapter.use_clients(answered_by(lambda request: reached.append(request) or httpx.Response(
                200, json=ANSWERS[protocol])))
            model = "m"
        call = dataclasses.replace(call_with("max_tokens"), model=model, logprobs=1 if protocol == "local" else None,
                                   echo=protocol == "local", stream=stream, clearance=Clearance())
        call.clearance.defer_to(_refusing_gate)
        try:
            with pytest.raises(Withheld):
                if stream:
                    async for _ in adapter.translators[Endpoint.COMPLETIONS].stream(call):
                        pass
                else:
                    await adapter.translators[Endpoint.COMPLETIONS].complete(call)
        finally:
            await adapter.close()
        if protocol == "local":
            reached.extend(engine.bodies)

    asyncio.run(run())
    return reached


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("protocol", sorted(registry.PROTOCOLS))
def test_every_adapter_awaits_the_requests_clearance_before_its_vendor_is_asked(protocol, stream):
    """A shared store's verdict on a request's limits is awaited by the vendor layer, as late as
    can be (the call's clearance, core/clearance.py): an adapter that asked its vendor first would serve a
    request its limits refuse. (The local call echoes with logprobs: it would tokenize first.)"""
    assert _reached(protocol, stream) == []
