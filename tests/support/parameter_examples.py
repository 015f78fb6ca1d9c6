"""A value for every request parameter of the contract, for the tests parametrized over the
capability map (tests/integration/test_capabilities.py, test_native_parameters.py): one the
contract accepts, easy to find in a vendor's request, and, where an answer can show it, that
shows (a stop sequence the fakes write, a count of choices...).

A parameter added to openapi.json needs its value here: `example()` says so, naming the table.
"""

from __future__ import annotations

from typing import Any

from gateway.core.parameters import CHAT_PARAMETERS, PARAMETERS

COMPLETIONS, CHAT = "completions", "chat"

# POST /v5/completions. The fakes write " w0 w1 w2...": the stop sequence cuts after " w1".
COMPLETION_EXAMPLES: dict[str, Any] = {
    "prompt": ["pa", "pb"], "best_of": 4, "echo": True, "frequency_penalty": 0.41, "logit_bias": {"1234": 7},
    "logprobs": 3, "max_tokens": 6, "n": 3, "presence_penalty": -0.29, "seed": 31337, "stop": [" w2"],
    "suffix": "sfx-9", "temperature": 0.37, "top_p": 0.83, "user": "u-cap-9",
}  # fmt: skip

_SAID = {"type": "object", "properties": {"said": {"type": "string"}}, "required": ["said"]}
_TOOLS = [{"type": "function", "function": {"name": name, "description": f"the {name} tool", "parameters": _SAID}}
          for name in ("lookup", "fetch")]

# POST /v5/chat/completions.
CHAT_EXAMPLES: dict[str, Any] = {
    "messages": [{"role": "user", "content": "cap-said-9"}], "audio": {"voice": "alloy", "format": "wav"},
    "frequency_penalty": 0.41, "function_call": {"name": "fetch"},
    "functions": [tool["function"] for tool in _TOOLS], "logit_bias": {"1234": 7}, "logprobs": True,
    "max_completion_tokens": 6, "max_tokens": 6, "metadata": {"tag": "cap-9"}, "modalities": ["text"], "n": 3,
    "parallel_tool_calls": False, "prediction": {"type": "content", "content": "cap-predicted-9"},
    "presence_penalty": -0.29, "reasoning_effort": "low", "response_format": {"type": "json_object"},
    "seed": 31337, "stop": [" w2"], "store": True, "temperature": 0.37, "tool_choice": {
        "type": "function", "function": {"name": "fetch"}}, "tools": _TOOLS, "top_k": 7, "top_logprobs": 2,
    "top_p": 0.83, "user": "u-cap-9", "x-openai-api-key": "sk-caller-own-key",
}  # fmt: skip
# What a chat parameter needs beside it to mean anything (the contract's rules: endpoints/chat/rules.py).
CHAT_COMPANIONS: dict[str, dict[str, Any]] = {
    "function_call": {"functions": CHAT_EXAMPLES["functions"]},
    "tool_choice": {"tools": _TOOLS},
    "parallel_tool_calls": {"tools": _TOOLS},
    "top_logprobs": {"logprobs": True},
}

_TABLES = {COMPLETIONS: ("COMPLETION_EXAMPLES", COMPLETION_EXAMPLES, PARAMETERS),
           CHAT: ("CHAT_EXAMPLES", CHAT_EXAMPLES, CHAT_PARAMETERS)}  # fmt: skip


class MissingExample(LookupError):
    """A parameter of the contract without its example value (a new field in openapi.json)."""


def example(endpoint: str, name: str) -> Any:
    """The example value of parameter `name` of `endpoint` ("completions" or "chat")."""
    table, examples, _ = _TABLES[endpoint]
    if name not in examples:
        raise MissingExample(
            f"no example value for request parameter {name!r} of POST /v5/{'chat/' if endpoint == CHAT else ''}"
            f"completions: add one to {table} in tests/support/parameter_examples.py (a value the contract "
            "accepts, easy to find in a vendor's request; docs/development.md, 'A new request parameter')")
    return examples[name]


def missing(endpoint: str) -> list[str]:
    """The contract's parameters of `endpoint` that have no example yet."""
    _, examples, parameters = _TABLES[endpoint]
    return [name for name in parameters if name not in examples]
