"""A Responses request's vendor call (POST /v5/responses), counted under its own endpoint (the
ledger, the limits, the cache's key and the traces name `responses`), of one of two kinds:

- bridged (`ResponsesCall`): the conversation the request and its stored chain make, as a chat
  call, which the protocols' chat translators serve as any `ChatCall` (endpoints/responses/request.py
  made it);
- native (`NativeResponsesCall`): the Responses body itself, for a vendor that has the Responses
  API (vendors/openai/responses.py), sent and answered as a vendor-native call is
  (core/inference.py), its answer read by the endpoint (endpoints/responses/native.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from gateway.core.chat import ChatCall
from gateway.core.endpoint import Endpoint
from gateway.core.inference import InferenceCall
from gateway.core.parameters import EMULATED, NATIVE, UNSUPPORTED, Support


@dataclass(slots=True)
class ResponsesCall(ChatCall):
    endpoint: ClassVar[Endpoint] = Endpoint.RESPONSES


@dataclass(slots=True)
class NativeResponsesCall(InferenceCall):
    """The Responses body for a vendor's own `/responses`: one call, never fanned out."""

    endpoint: ClassVar[Endpoint] = Endpoint.RESPONSES


# How a vendor bridged through chat serves each field of a Responses request
# (endpoints/responses/request.py is its implementation; tests/unit/test_responses_fields.py holds
# the two together): the chat parameter it becomes (then the vendor's chat record decides), or
# served by the gateway itself whatever the vendor, or refused on every vendor.
BRIDGED = {"input": "messages", "instructions": "messages", "max_output_tokens": "max_completion_tokens",
           "temperature": "temperature", "top_p": "top_p", "user": "user",
           "parallel_tool_calls": "parallel_tool_calls", "tools": "tools", "tool_choice": "tool_choice",
           "text": "response_format", "reasoning": "reasoning_effort"}
SERVED_HERE = {
    "store": "kept by the gateway (docs/responses.md), never by the vendor",
    "previous_response_id": "the stored conversation sent before `input`",
    "metadata": "kept with the stored response and echoed; not sent to the vendor",
    "stream": "OpenAI's Responses events, from the vendor's chat stream",
    "truncation": "'disabled' (the vendor's own context limit applies); 'auto' is refused",
}
# Where a vendor lacks the chat parameter a field becomes, the one it is sent as instead (a
# compatible server that predates `max_completion_tokens` has `max_tokens`).
INSTEAD = {"max_completion_tokens": "max_tokens"}
REFUSED = {"include": "nothing it names is produced through chat completions"}
# Why a field is refused where its chat parameter is (`text` asks `response_format` only for JSON).
_ONLY_WHEN = {"text": "only `text.format` json_object or json_schema needs it; `text` is always served",
              "reasoning": "only `reasoning.effort` needs it"}


def responses_verdicts(chat: Mapping[str, Support]) -> dict[str, Support]:
    """Each Responses field's support on a vendor whose chat parameters are judged `chat`."""
    found: dict[str, Support] = {}
    for name, parameter in BRIDGED.items():
        verdict = chat.get(parameter, Support(UNSUPPORTED, f"chat has no `{parameter}` on this vendor"))
        if verdict.kind == UNSUPPORTED and parameter in INSTEAD and INSTEAD[parameter] in chat:
            verdict = chat[INSTEAD[parameter]]
        if verdict.kind == UNSUPPORTED and name in _ONLY_WHEN:
            verdict = Support(UNSUPPORTED, f"{verdict.detail or ''} ({_ONLY_WHEN[name]})".strip())
        found[name] = verdict
    found |= {name: Support(EMULATED, why) for name, why in SERVED_HERE.items()}
    found |= {name: Support(UNSUPPORTED, why) for name, why in REFUSED.items()}
    return found


# How a vendor with the Responses API itself serves each field (endpoints/responses/native.py is
# its implementation): the vendor's own, but for what the gateway keeps itself, whatever the vendor.
NATIVE_SERVED_HERE = {name: SERVED_HERE[name] for name in ("store", "previous_response_id", "metadata")}
_NATIVE_DETAIL = {
    "tools": "function tools; a built-in tool is refused by name (the contract has no place for what it outputs)",
    "include": "'reasoning.encrypted_content' only (always asked: it is how a stored conversation hands a "
               "reasoning model its reasoning again); other values are refused by name",
    "stream": "the vendor's own Responses events, kept to the contract's",
}


def native_verdicts() -> dict[str, Support]:
    """Each Responses field's support on a vendor that has the Responses API itself."""
    return {name: Support(EMULATED, NATIVE_SERVED_HERE[name]) if name in NATIVE_SERVED_HERE
            else Support(NATIVE, _NATIVE_DETAIL.get(name)) for name in (*BRIDGED, *SERVED_HERE, *REFUSED)}
