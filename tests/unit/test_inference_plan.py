"""endpoints/inference/plan.py and unit.py in-process, with scripted native adapters: what the vendor
is sent, which fallback may serve, the shared-state members refused, the client's retries and
timeout held within the vendor's, the usage read (whole, partial, none) and a stream's events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.core.clearance import CLEAR
from gateway.core.completion import Chunk, Result
from gateway.core.config import VendorConfig
from gateway.core.endpoint import Endpoint
from gateway.core.errors import BadRequest, ParameterOutOfRange, VendorFailed
from gateway.core.inference import InferenceCall, NativeChoice
from gateway.endpoints.inference.plan import plan_inference
from gateway.endpoints.inference.unit import UNIT, AskedInference
from gateway.vendors.registry import Registry

USER = [{"role": "user", "content": "hello there"}]
MESSAGE = {"type": "message", "content": [{"type": "text", "text": "hi"}],
           "usage": {"input_tokens": 4, "output_tokens": 1}}


class Scripted:
    """A native adapter of `protocol` that is its own translator, answering `answer` (or each of `events`)."""

    def __init__(self, protocol: str, answer: Any = None, events: list[Any] = (), retries: int = 2,
                 inference_path: str | None = None) -> None:
        self.name = protocol
        self.protocol = protocol
        self.translators = {Endpoint.INFERENCE: self}
        self._config = VendorConfig(name=protocol, protocol=protocol, retries=retries)
        self._options = type("Options", (), {"inference_path": inference_path})()
        self.calls: list[InferenceCall] = []
        self._answer, self._events = answer, list(events)

    async def complete(self, call: InferenceCall) -> Result:
        self.calls.append(call)
        return Result([NativeChoice(0, "", raw=self._answer)])

    async def stream(self, call: InferenceCall) -> AsyncIterator[list[Chunk]]:
        self.calls.append(call)
        for event in self._events:
            yield [Chunk([NativeChoice(0, "", raw=json.dumps(event))])]


def registry(*adapters: Scripted) -> Registry:
    return Registry({a.name: a for a in adapters})  # type: ignore[misc]


def test_the_vendor_gets_args_with_the_routed_model_and_the_answer_is_billed_from_its_usage():
    anthropic = Scripted("anthropic", MESSAGE)
    planned = plan_inference({"max_tokens": 5, "messages": USER}, "anthropic/claude", "anthropic/claude", {},
                             registry(anthropic), CLEAR)
    result = asyncio.run(planned.complete())
    assert anthropic.calls[0].body == {"max_tokens": 5, "messages": USER, "model": "claude"}
    assert anthropic.calls[0].most_tokens() == 5 and anthropic.calls[0].retries is None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.estimated) == (4, 1, False)
    assert json.loads(UNIT.body({}, planned, result, result.usage)) == {"object": "generic_inference",
                                                                       "response": MESSAGE}


def test_a_partial_count_is_completed_by_the_gateway_and_flagged():
    local = Scripted("local", {"content": "hi there", "stop": True, "tokens_predicted": 2})
    planned = plan_inference({"prompt": "hello world foo", "n_predict": 2}, "local/m", "local/m", {},
                             registry(local), CLEAR)
    usage = asyncio.run(planned.complete()).usage
    # The vendor's completion count; the prompt counted here (no tokenizer: about four characters a token).
    assert (usage.prompt_tokens, usage.completion_tokens, usage.estimated) == (4, 2, True)


def test_usage_that_is_not_a_count_is_malformed_and_never_billed():
    planned = plan_inference({"max_tokens": 5}, "anthropic/c", "anthropic/c", {},
                             registry(Scripted("anthropic", {**MESSAGE, "usage": {"input_tokens": -1,
                                                                                  "output_tokens": 1}})), CLEAR)
    with pytest.raises(VendorFailed, match="malformed"):
        asyncio.run(planned.complete())


def test_no_usage_leaves_the_count_to_the_meter():
    planned = plan_inference({"max_tokens": 5, "messages": USER}, "anthropic/c", "anthropic/c", {},
                             registry(Scripted("anthropic", {"type": "message", "content": []})), CLEAR)
    assert asyncio.run(planned.complete()).usage is None


def test_a_fallback_must_speak_the_same_protocol():
    gemini, anthropic = Scripted("gemini", {}), Scripted("anthropic", MESSAGE)
    with pytest.raises(BadRequest, match="same protocol|its own protocol"):
        plan_inference({"contents": []}, "anthropic/c", "gemini/g", {}, registry(gemini, anthropic), CLEAR)


@pytest.mark.parametrize(("protocol", "member", "path"), [
    ("gemini", "cachedContent", None), ("anthropic", "container", None), ("anthropic", "mcp_servers", None),
    ("openai", "previous_response_id", "/responses"), ("openai", "conversation", "/v1/responses/")])
def test_members_reaching_the_shared_vendor_account_are_refused(protocol, member, path):
    adapter = Scripted(protocol, {}, inference_path=path)
    with pytest.raises(BadRequest) as refused:
        plan_inference({member: "x"}, f"{protocol}/m", f"{protocol}/m", {}, registry(adapter), CLEAR)
    assert (refused.value.code, refused.value.param) == ("shared_vendor_state", f"args.{member}")


def test_a_responses_member_is_the_clients_own_on_chat_completions():
    adapter = Scripted("openai", {})
    plan_inference({"conversation": "x"}, "openai/m", "openai/m", {}, registry(adapter), CLEAR)


def test_the_clients_retries_and_timeout_within_the_vendors():
    adapter = Scripted("anthropic", MESSAGE, retries=2)
    planned = plan_inference({"max_tokens": 1}, "anthropic/c", "anthropic/c",
                             {"num_retries": 1, "timeout_seconds": 5}, registry(adapter), CLEAR)
    assert (planned.call.retries, planned.call.timeout) == (1, 5.0)
    with pytest.raises(ParameterOutOfRange):
        plan_inference({"max_tokens": 1}, "anthropic/c", "anthropic/c", {"num_retries": 3}, registry(adapter), CLEAR)


def test_a_stream_relays_each_event_and_ends_with_the_vendors_usage():
    events = [{"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}},
              {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}},
              {"type": "message_delta", "usage": {"output_tokens": 2}}, {"type": "message_stop"}]
    adapter = Scripted("anthropic", events=events)
    planned = plan_inference({"max_tokens": 5, "stream": True}, "anthropic/c", "anthropic/c", {}, registry(adapter),
                             CLEAR)

    async def read() -> list[list[Chunk]]:
        return [batch async for batch in planned.chunks()]

    batches = asyncio.run(read())
    sent = [c.choices[0].response for batch in batches for c in batch if c.choices]
    assert [s["response"]["type"] for s in sent] == [e["type"] for e in events]
    assert all(s["object"] == "generic_inference.chunk" for s in sent)
    usage = batches[-1][0].billed
    assert (usage.prompt_tokens, usage.completion_tokens) == (3, 2)


def test_a_stream_without_the_vendors_end_is_malformed():
    adapter = Scripted("anthropic", events=[{"type": "message_start", "message": {"usage": {}}}])
    planned = plan_inference({"max_tokens": 5, "stream": True}, "anthropic/c", "anthropic/c", {}, registry(adapter),
                             CLEAR)

    async def read() -> None:
        async for _ in planned.chunks():
            pass

    with pytest.raises(VendorFailed, match="malformed"):
        asyncio.run(read())


def test_the_demand_reserves_the_bound_and_carries_the_400_without_one():
    adapter = Scripted("anthropic", MESSAGE)
    asked = AskedInference("anthropic/c", {"messages": USER}, {})
    planned = UNIT.plan(asked, "anthropic/c", registry(adapter), 1, CLEAR)
    demand = UNIT.demand(asked, planned, False)
    assert demand.endpoint is Endpoint.INFERENCE and demand.completion_tokens == 0
    assert demand.unbounded is not None and demand.unbounded.param == "args.max_tokens"
    bounded = AskedInference("anthropic/c", {"messages": USER, "max_tokens": 7}, {})
    demand = UNIT.demand(bounded, UNIT.plan(bounded, "anthropic/c", registry(adapter), 1, CLEAR), False)
    assert (demand.completion_tokens, demand.unbounded) == (7, None)
    assert "hello there" in demand.prompts_sent[0]
