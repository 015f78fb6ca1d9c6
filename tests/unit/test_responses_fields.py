"""The record of how a bridged vendor serves each Responses field (core/responses.py, what
GET /v5/vendors and docs/capabilities.md show) against the bridge that does it
(endpoints/responses/request.py): every field of the contract's request is in it once, and a
field said to become a chat parameter becomes exactly that parameter."""

from __future__ import annotations

import pytest

from gateway.core.parameters import EMULATED, NATIVE, UNSUPPORTED, Support
from gateway.core.responses import BRIDGED, REFUSED, SERVED_HERE, responses_verdicts
from gateway.endpoints.responses.request import Refused, chat_request
from generated.models import ResponseCreateRequest

EXAMPLES = {"input": "hello", "instructions": "be brief", "max_output_tokens": 5, "temperature": 0.5, "top_p": 0.5,
            "user": "u", "parallel_tool_calls": False,
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}], "tool_choice": "required",
            "text": {"format": {"type": "json_object"}}, "reasoning": {"effort": "low"}}


def test_every_field_of_the_contract_is_recorded_once():
    fields = {field.alias or name for name, field in ResponseCreateRequest.model_fields.items()} - {"model"}
    recorded = [*BRIDGED, *SERVED_HERE, *REFUSED]
    assert sorted(recorded) == sorted(fields)


@pytest.mark.parametrize("field", sorted(BRIDGED))
def test_a_bridged_field_becomes_its_chat_parameter(field):
    base = {"model": "v/m", "input": "hi"}
    plain = chat_request(base)
    sent = chat_request(base | {field: EXAMPLES[field]})
    changed = {name for name in sent if sent[name] != plain.get(name)}
    assert changed == {BRIDGED[field]}


def test_a_refused_field_is_refused_by_name():
    with pytest.raises(Refused) as refused:
        chat_request({"model": "v/m", "input": "hi", "include": ["reasoning.encrypted_content"]})
    assert refused.value.param == "include[0]"


def test_verdicts_follow_the_vendors_chat_record():
    chat = {"messages": Support(NATIVE), "response_format": Support(UNSUPPORTED, "no JSON mode")}
    found = responses_verdicts(chat)
    assert found["input"].kind == NATIVE and found["store"].kind == EMULATED
    assert found["text"].kind == UNSUPPORTED and "no JSON mode" in found["text"].detail
    assert found["include"].kind == UNSUPPORTED and found["temperature"].kind == UNSUPPORTED


def test_max_output_tokens_is_max_tokens_where_the_vendor_lacks_max_completion_tokens():
    chat = {"max_completion_tokens": Support(UNSUPPORTED, "old server"), "max_tokens": Support(NATIVE)}
    assert responses_verdicts(chat)["max_output_tokens"].kind == NATIVE
