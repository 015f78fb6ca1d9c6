"""POST /v5/inference in the contract: scale-gp-beta's shapes, both ways (what its
`inference.create` sends validates against InferenceRequest; what the contract promises parses as
its InferenceResponse and InferenceResponseChunk), its errors documented in the house's shapes, and
every 400 code the endpoint's rules raise named in the operation's 400."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import jsonschema_rs
import pytest
from scale_gp_beta import SGPClient
from scale_gp_beta.types import InferenceResponse, InferenceResponseChunk

from gateway.http.server.validation import problems
from tests.support.fakes.asgi import read_request, send_json
from tests.support.fakes.server import ServerThread
from tests.support.gateway_process import ROOT

SPEC = json.loads((ROOT / "openapi.json").read_text())
OPERATION = SPEC["paths"]["/v5/inference"]["post"]
RULES = ROOT / "gateway" / "endpoints" / "inference"


def validator(name: str) -> jsonschema_rs.Validator:
    return jsonschema_rs.Draft202012Validator({"$ref": f"#/components/schemas/{name}",
                                               "components": SPEC["components"]})


def test_the_operation_is_named_scoped_and_tagged_as_chat_is():
    chat = SPEC["paths"]["/v5/chat/completions"]["post"]
    assert OPERATION["operationId"] == "POST-V5-/v5/inference"
    assert OPERATION["security"] == chat["security"] == [{"APIKeyHeader": ["inference"]}, {"HTTPBearer": ["inference"]}]
    assert OPERATION["tags"] == chat["tags"]
    body = OPERATION["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/InferenceRequest"}


def test_its_errors_are_documented_in_the_houses_shapes():
    responses = OPERATION["responses"]
    for status in ("400", "401", "403", "404", "408", "413", "415", "429", "500", "502", "503", "504"):
        error = responses[status]["content"]["application/json"]["schema"]
        assert error == {"$ref": "#/components/schemas/ErrorResponse"}, status
    assert responses["422"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/HTTPValidationError"}
    ok = responses["200"]["content"]
    assert ok["application/json"]["schema"] == {"$ref": "#/components/schemas/InferenceResponse"}
    assert ok["text/event-stream"]["schema"] == {"$ref": "#/components/schemas/InferenceStreamEvent"}


def _codes() -> set[str]:
    """Every `code=` the endpoint's rules give a 400 (a BadRequest), read from their source."""
    found = set()
    for path in RULES.glob("*.py"):
        for call in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "BadRequest"):
                continue
            found |= {node.value.value for node in call.keywords
                      if node.arg == "code" and isinstance(node.value, ast.Constant)}
    return found


def test_every_400_code_of_the_endpoints_rules_is_documented():
    codes = _codes()
    assert {"routing_in_args", "model_mismatch", "invalid_stream_flag", "output_bound_required",
            "invalid_output_bound"} <= codes
    assert [code for code in codes if f"`{code}`" not in OPERATION["responses"]["400"]["description"]] == []


@pytest.mark.parametrize(("body", "where"), [
    ({"model": "local/smollm2-135m", "args": "prompt"}, ["body", "args"]),
    ({"model": "local/smollm2-135m", "args": [1]}, ["body", "args"]),
    ({"model": "local/smollm2-135m", "args": {f"k{i}": i for i in range(257)}}, ["body", "args"]),
    ({"model": "local/smollm2-135m", "inference_configuration": {"timeout_seconds": 0}},
     ["body", "inference_configuration", "timeout_seconds"]),
    ({"model": "local/smollm2-135m", "inference_configuration": {"num_retries": -1}},
     ["body", "inference_configuration", "num_retries"]),
    ({"model": "local/smollm2-135m", "inference_configuration": {"retries": 1}},
     ["body", "inference_configuration", "retries"]),
    ({"model": "local/smollm2-135m", "stream": True}, ["body", "stream"]),
    ({"args": {}}, ["body", "model"]),
    ({"model": ""}, ["body", "model"]),
])
def test_a_body_outside_the_shape_is_a_422_naming_where(body, where):
    found = problems(validator("InferenceRequest"), body)
    assert found and found[0]["loc"] == where, found


def test_every_documented_example_is_a_valid_request():
    examples = OPERATION["requestBody"]["content"]["application/json"]["examples"]
    for example in examples.values():
        assert problems(validator("InferenceRequest"), example["value"]) == []


class _Capture:
    """A loopback server answering POST /v5/inference with the contract's answer, keeping the body."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.headers: list[dict] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        headers, raw = await read_request(scope, receive)
        self.bodies.append(json.loads(raw))
        self.headers.append(headers)
        await send_json(send, 200, {"object": "generic_inference",
                                    "response": {"content": [{"type": "text", "text": "hi"}], "stop": True}})


def test_what_the_sdk_sends_is_a_valid_request_and_what_the_contract_answers_it_reads():
    capture = _Capture()
    with ServerThread(capture) as server:
        client = SGPClient(api_key="k", account_id="default", base_url=server.url, max_retries=0)
        result = client.inference.create(
            model="anthropic/claude-x", args={"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
            inference_configuration={"num_retries": 1, "timeout_seconds": 30})
    assert problems(validator("InferenceRequest"), capture.bodies[0]) == []
    assert capture.headers[0]["x-api-key"] == "k"
    assert result.object == "generic_inference" and result.response == {"content": [{"type": "text", "text": "hi"}],
                                                                        "stop": True}
    assert jsonschema_rs.Draft202012Validator({"$ref": "#/components/schemas/InferenceResponse",
                                               "components": SPEC["components"]}).is_valid(result.model_dump())


def test_a_stream_event_is_one_chunk_the_sdks_type_reads_and_the_end_is_named():
    chunk = {"object": "generic_inference.chunk", "response": {"type": "message_stop"}}
    assert validator("InferenceChunk").is_valid(chunk)
    assert InferenceResponseChunk.model_validate(chunk).response == {"type": "message_stop"}
    assert validator("InferenceStreamEvent").is_valid({"data": json.dumps(chunk)})
    assert validator("InferenceStreamEvent").is_valid({"event": "done", "data": "[DONE]"})
    assert not validator("InferenceChunk").is_valid({"object": "generic_inference", "response": 1})
    assert InferenceResponse.model_validate({"object": "generic_inference", "response": [1, "a"]}).response == [1, "a"]
    assert "event: done" in SPEC["components"]["schemas"]["InferenceStreamEvent"]["description"]


def test_the_changelog_names_the_operation():
    # Named in the section of the version that added it: [Unreleased] until the contract is released.
    changelog = (ROOT / "contract" / "CHANGELOG.md").read_text()
    sections = changelog.split("## [Unreleased]", 1)[1].split("\n## [")
    assert any("`POST /v5/inference`" in section and "### Added" in section for section in sections)
    assert Path(ROOT / "generated" / "openapi.json").read_text() == (ROOT / "openapi.json").read_text()
