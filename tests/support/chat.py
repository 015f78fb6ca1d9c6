"""What the chat tests of every vendor protocol share: the conversation and tools they send, and
the reading of what comes back (a stream per choice, a refusal, an unbilled failure's row)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.support.processes import wait_until
from tests.support.provision import ledger_rows

USER = [{"role": "user", "content": "hello there"}]
TOOLS = [{"type": "function", "function": {"name": name, "description": f"the {name} tool", "parameters": {
    "type": "object", "properties": {"said": {"type": "string"}}, "required": ["said"]}}} for name in ("lookup", "fetch")]


def row(database_url: str, request_id: str) -> dict[str, Any]:
    """A request's ledger row in acct-a, once written."""
    return wait_until(lambda: next((found for found in ledger_rows(database_url, "acct-a")
                                    if found["request_id"] == request_id), None), message="the ledger row")


def per_choice(chunks: list[Any]) -> dict[int, list[Any]]:
    """A streamed chat completion's pieces (openai SDK chunks, the usage chunk left out) per choice."""
    pieces: dict[int, list[Any]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            pieces.setdefault(choice.index, []).append(choice)
    return pieces


def assert_refused(answer: Any, param: str, vendor: str) -> None:
    """A 400 naming the parameter and the vendor."""
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and vendor in error["message"]


def assert_failure_unbilled(client: openai.OpenAI, database_url: str, model: str) -> None:
    """The vendor's failure is the client's 502, and its ledger row bills nothing."""
    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(model=model, messages=USER, max_tokens=1)
    assert failed.value.status_code == 502
    found = row(database_url, failed.value.response.headers["x-request-id"])
    assert found["endpoint"] == "chat" and not found["prompt_tokens"] and not found["completion_tokens"]
