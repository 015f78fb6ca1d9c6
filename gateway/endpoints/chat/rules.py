"""The rules of a chat request that its schema cannot say, each a 422 naming the field (as OpenAI
answers them): an assistant message says something or calls something; `tool_choice` and
`function_call` name tools the request defines, and need some; the JSON Schemas a request carries
(a tool's or function's `parameters`, `response_format.json_schema.schema`) are valid,
self-contained and within the gateway's bounds (core/client_schemas.py: the gateway fetches
nothing a schema names). A strict schema, which answers are held to, is compiled by the plan
(planner/verify.py `answer_schema`), once for all its vendor calls. What no vendor
can be given is a 400 on every vendor, as OpenAI answers it: parameters valid alone but not
together (`max_tokens` with `max_completion_tokens`), an image's data: URL that is not base64."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping
from typing import Any

from gateway.core import client_schemas
from gateway.core.errors import BadRequest, ValidationFailed
from gateway.planner.verify import STRICT_SCHEMA, strict_schema

_DATA_URL = re.compile(r"^data:image/[\w.+-]+;base64,(?P<data>.*)$", re.DOTALL)


def check(body: Mapping[str, Any]) -> None:
    problems = list(_problems(body))
    if problems:
        raise ValidationFailed.in_body(problems)
    _refuse_unservable(body)


def _refuse_unservable(body: Mapping[str, Any]) -> None:
    """What no vendor can be given, a 400 as OpenAI answers it (its type, code and `param`), the
    same on every vendor: parameters valid alone but not together (never one of them silently
    taken), and an image whose data: URL holds no image (which one vendor would refuse and another
    forward)."""
    if body.get("max_tokens") is not None and body.get("max_completion_tokens") is not None:
        raise BadRequest("Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported: "
                         "give max_completion_tokens alone (max_tokens is its deprecated name)",
                         code="invalid_parameter_combination", param="max_tokens")
    for i, message in enumerate(body["messages"]):
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if part["type"] == "image_url" and (why := _data_url_problem(part["image_url"]["url"])) is not None:
                where = f"messages[{i}].content[{j}].image_url"
                raise BadRequest(f"Invalid '{where}': expected a base64 data: URL of an image "
                                 f"(data:image/png;base64,...), but {why}", code="invalid_image", param=where)


def _data_url_problem(url: str) -> str | None:
    """What is wrong with an image's `data:` URL (None for a good one, or a URL of another scheme:
    the vendor's to fetch or refuse)."""
    if not url.startswith("data:"):
        return None
    found = _DATA_URL.match(url)
    if found is None:
        return "it is not one"
    try:
        data = base64.b64decode(found["data"], validate=True)
    except binascii.Error:
        return "its data is not valid base64"
    return None if data else "it holds no data"


def _problems(body: Mapping[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    for i, message in enumerate(body["messages"]):
        if message["role"] == "assistant" and message.get("content") is None and not message.get("tool_calls") \
                and not message.get("function_call"):
            yield ("messages", i), "an assistant message needs content, tool_calls or function_call"
    if body.get("top_logprobs") is not None and body.get("logprobs") is not True:
        yield ("top_logprobs",), "top_logprobs needs logprobs: true"
    tools = body.get("tools") or []
    names = [tool["function"]["name"] for tool in tools]
    choice = body.get("tool_choice")
    if choice is not None and choice != "none" and not tools:
        yield ("tool_choice",), "tool_choice needs tools"
    if isinstance(choice, dict) and choice["function"]["name"] not in names:
        yield ("tool_choice", "function", "name"), f"names no tool of the request: {choice['function']['name']}"
    functions = body.get("functions") or []
    call = body.get("function_call")
    if call is not None and call != "none" and not functions:
        yield ("function_call",), "function_call needs functions"
    if isinstance(call, dict) and call["name"] not in [f["name"] for f in functions]:
        yield ("function_call", "name"), f"names no function of the request: {call['name']}"
    if tools and functions:
        yield ("functions",), "give tools or the deprecated functions, not both"
    for where, defined in (("tools", [tool["function"] for tool in tools]), ("functions", functions)):
        seen = set()
        for i, function in enumerate(defined):
            if function["name"] in seen:
                yield (where, i, "name"), f"a second function named {function['name']}"
            seen.add(function["name"])
    yield from client_schemas.problems(_schemas(body, tools, functions))


def _schemas(body: Mapping[str, Any], tools: list[Any], functions: list[Any]) -> Iterator[client_schemas.Checked]:
    """The request's JSON Schemas: where each stands, the schema, and whether the gateway compiles it
    (a strict one: answers are held to it)."""
    for i, tool in enumerate(tools):
        if "parameters" in tool["function"]:
            yield ("tools", i, "function", "parameters"), tool["function"]["parameters"], False
    for i, function in enumerate(functions):
        if "parameters" in function:
            yield ("functions", i, "parameters"), function["parameters"], False
    format_ = body.get("response_format") or {}
    if format_.get("type") == "json_schema" and "schema" in format_["json_schema"]:
        yield STRICT_SCHEMA[1:], format_["json_schema"]["schema"], strict_schema(format_) is not None
