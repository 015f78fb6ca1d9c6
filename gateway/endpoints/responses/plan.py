"""A Responses request's plan. On a vendor with the Responses API itself (its translator for the
endpoint is a `NativeTranslator`: vendors/openai/responses.py), the request's own body, stateless
(native_plan.py). Elsewhere, its conversation (the stored chain, then its own input) bridged to
a chat call (request.py `chat_request`, a `ResponsesCall`), judged against the vendor's
translator for the endpoint (the protocol's chat translator: vendors/<protocol>/adapter.py),
run by the one planner (planner/plan.py) as one vendor call.

What the bridge cannot carry is refused naming the field and the vendor (request.py `Refused`);
what chat's record refuses is refused as chat's is (planner/capabilities.py `check_chat`). The plan
keeps the Responses request and the items it keeps, which its answer (answer.py) and its store
(http/response_events.py, handlers/responses.py) read."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.core.chat import prompt_text
from gateway.core.clearance import Clearance
from gateway.core.completion import Attempt, Chunk, Result
from gateway.core.endpoint import Endpoint
from gateway.core.parameters import GATEWAY_FIELDS, UNSUPPORTED
from gateway.core.responses import INSTEAD, ResponsesCall
from gateway.endpoints.responses.native import native_request
from gateway.endpoints.responses.native_plan import NativePlan, plan_native
from gateway.endpoints.responses.request import Refused, chat_request, conversation_text, input_items
from gateway.planner import capabilities
from gateway.planner.plan import Plan, fan_out
from gateway.planner.verify import answer_schema
from gateway.vendors.native import NativeTranslator
from gateway.vendors.registry import Registry


@dataclass(slots=True)
class ResponsesPlan:
    """The planner's plan of the bridged call, with what the response echoes and keeps."""

    inner: Plan
    request: Mapping[str, Any]  # the Responses request as the client sent it (its `model` the one planned)
    items: list[dict[str, Any]] = field(default_factory=list)  # its own input items, as stored

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def prompts(self) -> list[str]:
        return self.inner.prompts

    @property
    def include_usage(self) -> bool:
        return True  # a response always carries its usage

    @property
    def stream(self) -> bool:
        return self.inner.stream

    @property
    def vendor_calls(self) -> int:
        return self.inner.vendor_calls

    @property
    def choices(self) -> int:
        return 1

    def echoed(self, index: int) -> str:
        return ""

    def attempt(self) -> Attempt:
        return self.inner.attempt()

    async def complete(self) -> Result:
        return await self.inner.complete()

    def chunks(self) -> AsyncIterator[list[Chunk]]:
        return self.inner.chunks()


# Either plan: the way (http/serving.py, http/response_events.py) reads both alike.
AnyResponsesPlan = ResponsesPlan | NativePlan


def plan_responses(request: Mapping[str, Any], history: Sequence[dict[str, Any]], model: str, registry: Registry,
                   max_vendor_calls: int | None, clearance: Clearance) -> AnyResponsesPlan:
    """The vendor call that serves `request` (continuing the stored `history`) on `model`."""
    vendor, _, name = model.partition("/")
    adapter = registry.serving(vendor, name, Endpoint.RESPONSES)
    translator = adapter.translators[Endpoint.RESPONSES]
    asked = {**request, "model": model}
    try:
        if isinstance(translator, NativeTranslator):
            native = native_request(asked, history) | {"model": name}
            prompts = [prompt_text([{"role": "user", "content": conversation_text(
                request.get("instructions"), native["input"])}])]
            return plan_native(adapter, translator, native, prompts, model, asked, input_items(request), clearance)
        body = chat_request(asked, history)
    except Refused as refused:
        raise refused.error(adapter.name) from None
    for usual, instead in INSTEAD.items():  # the parameter the vendor has, where it lacks the usual one
        if usual in body and capabilities.verdict(translator.capabilities, usual).kind == UNSUPPORTED:
            body[instead] = body.pop(usual)
    messages = body["messages"]
    parameters = {key: value for key, value in body.items()
                  if key not in GATEWAY_FIELDS and key != "messages" and value is not None}
    call = ResponsesCall(model=name, messages=messages, parameters=parameters, stream=bool(body.get("stream")),
                         clearance=clearance, prompts=[prompt_text(messages)])
    served_here = capabilities.check_chat(adapter, translator, call)
    if served_here:  # served by the gateway (`user` recorded): never sent to the vendor
        call.parameters = {key: value for key, value in parameters.items() if key not in served_here}
    inner = Plan(adapter=adapter, translator=translator, model=model, prompts=call.prompts, n=1,
                 legs=fan_out(adapter, translator, call, 1, max_vendor_calls), stream=call.stream,
                 include_usage=True, user=parameters.get("user"), answer_schema=answer_schema(call))
    return ResponsesPlan(inner, asked, input_items(request))
