"""Steering of positive fuzz cases (tests/contract/fuzz_hooks.py `map_case`), per endpoint: each sent
to the run's vendor, kept inside what a deployment limits but the contract cannot say, made to keep
the cross-field rules the schema cannot express, and half of them stripped of what the vendor cannot
serve (`servable`), so that they reach it; the other half must be refused as the capability map says
(tests/contract/fuzz_checks.py)."""

from __future__ import annotations

import json
import zlib
from typing import Any

from gateway.core import client_schemas
from gateway.core.errors import ValidationFailed
from gateway.core.parameters import EMULATED, UNSUPPORTED
from gateway.planner.capabilities import verdict, verdicts
from tests.contract.fuzz_vendor import BEST_OF_MAX, SAID, VENDOR, Vendor

def steer_native(body: dict[str, Any], vendor: Vendor = VENDOR) -> None:
    """A positive vendor-native case sent to the run's vendor, its stream and output kept short (the
    protocol's own members: endpoints/inference/wires.py); `args` stays the fuzz's, for the vendor
    to take or refuse (a 400 the check below holds to the documented codes)."""
    body["model"] = vendor.model
    args = body.get("args")
    if isinstance(args, dict):
        for member in ("n_predict", "max_tokens", "max_completion_tokens"):
            if member in args:
                args[member] = min(args[member], vendor.limits["stream_max_tokens"]) if _is_int(args[member]) \
                    else args[member]


def _fine(schema: Any, compiled: bool = False) -> bool:
    """Whether the gateway takes `schema` (gateway/core/client_schemas.py), and compiles it when it is strict."""
    try:
        if list(client_schemas.problems([((), schema, compiled)])):
            return False
    except TypeError:  # an integer beyond 64 bits, which the gateway reads as a number of JSON's (a float)
        return False
    try:
        return not compiled or client_schemas.compiled(schema, ()) is not None
    except ValidationFailed:
        return False


def keep_chat_rules(body: dict[str, Any]) -> None:
    """A positive chat case made to keep the rules its schema cannot say (gateway/endpoints/chat/rules.py)."""
    if body.get("top_logprobs") is not None:
        body["logprobs"] = True
    if body.get("tools") and body.get("functions"):
        body.pop("functions")
    for tools, choice, name_of in (("tools", "tool_choice", lambda c: c["function"]["name"]),
                                   ("functions", "function_call", lambda c: c["name"])):
        defined = body.get(tools) or []
        functions = [d["function"] if tools == "tools" else d for d in defined]
        names = [f["name"] for f in functions]
        if len(set(names)) != len(names):
            body[tools] = [d for i, d in enumerate(defined) if names.index(names[i]) == i]
        for function in functions:
            if "parameters" in function and not _fine(function["parameters"]):
                del function["parameters"]
        picked = body.get(choice)
        if picked not in (None, "none") and (not defined or isinstance(picked, dict) and name_of(picked) not in names):
            body.pop(choice)
    format_ = body.get("response_format")
    if isinstance(format_, dict) and format_.get("type") == "json_schema" and \
            not _fine(format_["json_schema"].get("schema", {}), format_["json_schema"].get("strict") is True):
        format_["json_schema"]["schema"] = {"type": "object"}
    for message in body["messages"]:
        if message.get("role") == "assistant" and message.get("content") is None and not message.get("tool_calls") \
                and not message.get("function_call"):
            message["content"] = ""


def steer_chat(body: dict[str, Any], vendor: Vendor = VENDOR) -> None:
    """A positive chat case made one the vendor can serve or must refuse as documented: its model, its
    choices and generations within the limits (short messages for the real model), then the chat rules."""
    if isinstance(body.get("model"), str):
        body["model"] = vendor.model
    limits = vendor.limits
    if _is_int(body.get("n")) and body["n"] > limits["choices"]:
        body["n"] = limits["choices"]
    most = limits.get("max_tokens")
    if body.get("stream") is True:
        most = min(most or limits["stream_max_tokens"], limits["stream_max_tokens"])
    if most is not None:
        given = [name for name in ("max_tokens", "max_completion_tokens") if body.get(name) is not None]
        for name in given:
            if not (_is_int(body[name]) and body[name] <= most):
                body[name] = most
        if not given:
            body["max_completion_tokens"] = most  # the default runs to the end of the context
    if "message_chars" in limits:
        del body["messages"][limits["messages"]:]
        for message in body["messages"]:
            _shorten(message, limits["message_chars"])
    if zlib.crc32(json.dumps(body, sort_keys=True).encode()) % 2 == 0:
        servable_chat(body, vendor)
    keep_chat_rules(body)
    format_ = body.get("response_format")
    if vendor.name != "local" and isinstance(format_, dict) and (format_.get("json_schema") or {}).get("strict"):
        format_["json_schema"]["schema"] = SAID  # what the fakes write, whatever the schema (the real model obeys it)


def steer_responses(body: dict[str, Any], vendor: Vendor = VENDOR) -> None:
    """A positive Responses case made one the vendor can serve or must refuse as documented: its
    model, its output within the limits (a short input for the real model), and no chain onto a
    response the run never made (a 404 by design)."""
    if isinstance(body.get("model"), str):
        body["model"] = vendor.model
    limits = vendor.limits
    most = limits.get("max_tokens")
    if body.get("stream") is True:
        most = min(most or limits["stream_max_tokens"], limits["stream_max_tokens"])
    if most is not None and not (_is_int(body.get("max_output_tokens")) and body["max_output_tokens"] <= most):
        body["max_output_tokens"] = max(most, 16)  # OpenAI's least
    body.pop("previous_response_id", None)
    format_ = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    if vendor.name != "local" and isinstance(format_, dict) and format_.get("strict") and "schema" in format_:
        format_["schema"] = SAID  # what the fakes write, whatever the schema (the real model obeys it)
    if "message_chars" in limits:
        if isinstance(body.get("input"), str):
            body["input"] = body["input"][:limits["message_chars"]]
        elif isinstance(body.get("input"), list):
            del body["input"][limits["messages"]:]
            for item in body["input"]:
                if isinstance(item, dict):
                    _shorten(item, limits["message_chars"])


def _shorten(message: dict[str, Any], chars: int) -> None:
    content = message.get("content")
    if isinstance(content, str):
        message["content"] = content[:chars]
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                part["text"] = part["text"][:chars]


def servable_chat(body: dict[str, Any], vendor: Vendor = VENDOR) -> None:
    """The chat body without what the vendor cannot serve: unsupported parameters dropped, values
    moved into the vendor's narrower range."""
    for name, found in verdicts(vendor.chat_capabilities).items():
        value = body.get(name)
        if found.kind == UNSUPPORTED and name != "messages":
            body.pop(name, None)
        elif found.range is not None and isinstance(value, int | float) and value not in found.range:
            body[name] = min(max(value, found.range.minimum), found.range.maximum)


def steer(body: dict[str, Any], vendor: Vendor = VENDOR) -> None:
    """A positive case's body made one the vendor can serve or must refuse as documented."""
    if isinstance(body.get("model"), str):
        body["model"] = vendor.model
    _keep_within_limits(body, vendor.limits)
    if zlib.crc32(json.dumps(body, sort_keys=True).encode()) % 2 == 0:
        servable(body, vendor)
    _best_of_at_least_n(body)


def _keep_within_limits(body: dict[str, Any], limits: dict[str, int]) -> None:
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        del prompt[limits["prompts"]:]
    if "prompt_chars" in limits:
        # Scoring a prompt (echo with logprobs) costs the real model a call per token, more for a
        # token that is part of a character: such prompts are kept shorter still.
        scored = body.get("echo") is True and body.get("logprobs") is not None
        chars = limits["scored_prompt_chars"] if scored else limits["prompt_chars"]
        if isinstance(prompt, str):
            body["prompt"] = prompt[:chars]
        elif isinstance(prompt, list):
            prompt[:] = [p[:chars] if isinstance(p, str) else p for p in prompt]
    per_prompt = max(1, limits["choices"] // (len(prompt) if isinstance(prompt, list) and prompt else 1))
    for name in ("n", "best_of"):
        if _is_int(body.get(name)) and body[name] > per_prompt:
            body[name] = per_prompt
    most = limits.get("max_tokens")
    if body.get("stream") is True:
        most = min(most or limits["stream_max_tokens"], limits["stream_max_tokens"])
    if most is not None and not (_is_int(body.get("max_tokens")) and body["max_tokens"] <= most):
        body["max_tokens"] = most  # also when absent: the default (16) is long for a real model
    if "vocabulary" in limits and isinstance(body.get("logit_bias"), dict):
        body["logit_bias"] = {str(int(k) % limits["vocabulary"]): v for k, v in body["logit_bias"].items()}


def servable(body: dict[str, Any], vendor: Vendor = VENDOR) -> None:
    """The body without what the vendor cannot serve: unsupported parameters dropped, values
    moved into the vendor's narrower range, echo dropped where it cannot go with logprobs."""
    caps = vendor.capabilities
    for name, found in ((name, verdict(caps, name)) for name in caps):
        value = body.get(name)
        if found.kind == UNSUPPORTED and name == "prompt":
            if isinstance(value, list):
                body["prompt"] = value[0]  # a list of prompts is the parameter; one prompt is required
        elif found.kind == UNSUPPORTED:
            body.pop(name, None)
        elif found.range is not None and isinstance(value, int | float) and value not in found.range:
            body[name] = min(max(value, found.range.minimum), found.range.maximum)
    if verdict(caps, "echo").kind == EMULATED and body.get("logprobs") is not None:
        body.pop("echo", None)


def _best_of_at_least_n(body: dict[str, Any]) -> None:
    n, best_of = body.get("n"), body.get("best_of")
    if _is_int(n) and _is_int(best_of) and best_of < n:
        if n <= BEST_OF_MAX and body.get("stream") is not True:  # a stream allows best_of 1 only
            body["best_of"] = n
        else:
            del body["best_of"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)  # 65.0 is an integer too
