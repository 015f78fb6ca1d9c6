"""POST /v5/responses on the gemini protocol (bridged through its chat translator to the fake
generateContent): a function call and its result over two turns chained by previous_response_id,
streamed and plain, and `text.format` json_schema to Gemini's JSON output."""

from __future__ import annotations

import json

import openai
import pytest

TOOLS = [{"type": "function", "name": "lookup", "description": "the lookup tool", "strict": False,
          "parameters": {"type": "object", "properties": {"said": {"type": "string"}}, "required": ["said"]}}]


@pytest.fixture
def oai(vclient, vendors_gateway, database):
    return openai.OpenAI(api_key=database.key, base_url=f"{vendors_gateway.url}/v5", max_retries=0)


@pytest.mark.parametrize("stream", [False, True])
def test_a_function_call_and_its_result_over_two_turns(oai, gemini_upstream, stream):
    def create(**asked):
        if not stream:
            return oai.responses.create(**asked)
        return list(oai.responses.create(**asked, stream=True))[-1].response

    first = create(model="gemini/gem-x", input="hello there", tools=TOOLS, max_output_tokens=2)
    (call,) = first.output
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "lookup", {"said": "hello there"})
    second = create(model="gemini/gem-x", previous_response_id=first.id, tools=TOOLS, max_output_tokens=2,
                    input=[{"type": "function_call_output", "call_id": call.call_id, "output": "found"}])
    assert second.output_text == " w0 w1"
    contents = gemini_upstream.requests[-1]["body"]["contents"]
    assert [list(part)[0] for c in contents for part in c["parts"]] == ["text", "functionCall", "functionResponse"]
    assert contents[-1]["parts"][0]["functionResponse"]["name"] == "lookup"


def test_text_format_json_schema_is_geminis_json_output(oai, gemini_upstream):
    schema = {"type": "object", "properties": {"said": {"type": "string"}}, "required": ["said"],
              "additionalProperties": False}
    answer = oai.responses.create(model="gemini/gem-x", input="hello there", text={"format": {
        "type": "json_schema", "name": "said", "schema": schema, "strict": True}})
    assert json.loads(answer.output_text) == {"said": "hello there"}
    config = gemini_upstream.requests[-1]["body"]["generationConfig"]
    assert config["responseMimeType"] == "application/json"
