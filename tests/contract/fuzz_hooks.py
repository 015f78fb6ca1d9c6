"""Schemathesis hooks and checks for fuzzing the gateway (SCHEMATHESIS_HOOKS=tests.contract.fuzz_hooks), one
vendor protocol per run: tests/contract/fuzz.py names the vendor in FUZZ_VENDOR (JSON: its name, protocol,
options, the model to ask for, and the limits below).

Every case is sent with the key of the scope its operation's security requirement names (FUZZ_KEYS:
JSON, scope -> key; tests/contract/fuzz.py makes one per scope), so every operation is reached.

Positive cases must be requests the gateway can serve or must refuse as documented, so they are
steered to the run's vendor and kept inside what a deployment limits but the contract cannot say
(the `limits`: choices per request, under GATEWAY_MAX_VENDOR_CALLS and quick to generate; for the
real model a small max_tokens, short prompts and messages, and token ids of its vocabulary), and made
to respect the cross-field rules the schema cannot express (best_of >= n; chat's: keep_chat_rules).
Half of them (chosen by a hash of the body, so a run is reproducible) are also stripped of what the
vendor cannot serve, so that they reach it; the other half keep it, and must be refused as the
capability map says. Negative cases are left alone.

Two checks of our own run beside schemathesis's:
- `refusals_are_documented`: a schema-valid request answered 400 passes only when the error names
  the run's vendor and a parameter that the vendor's capability map (gateway/planner/capabilities.py
  over the adapter's support records) says it cannot serve in that request: unsupported, outside
  the vendor's narrower range, or echo emulated together with logprobs. Any other refusal of valid
  data fails (positive_data_acceptance lets 400 through to this check: tests/contract/fuzz.toml).
- `unusable_values_are_named`: a schema-valid request answered 422 passes only as an administrative
  value the schema cannot rule out (an `expires_at` past, a model pattern naming no vendor, a
  `period` without a budget), answered `invalid_value` naming that field, or as a request's `model`
  that is neither `vendor/name` nor an alias (which the configuration, not the schema, defines: the
  fuzzed gateways have none), answered `invalid_request_body` naming `model`.
- `answers_keep_openais_contract`: what the schema cannot say of a 200: one choice per prompt and n,
  indexed prompt-major; `logprobs` null unless asked for, and each top_logprobs entry holding its
  token with its token_logprobs value and at most logprobs + 1 entries; usage present (in a stream:
  a usage chunk exactly when asked for), its total the sum, marked estimated exactly when the
  x-gateway-usage-estimated header says so; in a stream, one finish_reason per choice and [DONE].
"""

from __future__ import annotations

import json
import math
import os
import re
import zlib
from datetime import UTC, datetime
from decimal import Decimal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import schemathesis

from gateway.core.endpoint import Endpoint
from gateway.core import client_schemas
from gateway.core.config import Settings, VendorConfig
from gateway.core.errors import ValidationFailed
from gateway.core.parameters import EMULATED, UNSUPPORTED, Capabilities, Range
from gateway.planner.capabilities import used_parameters, verdict, verdicts
from gateway.endpoints.completions.plan import completion_call
from gateway.store import usage
from gateway.vendors import registry
from generated.models import CompletionRequest

BEST_OF_MAX = 20  # openapi.json: best_of maximum
COMPLETIONS = "/v5/completions"
INFERENCE = (COMPLETIONS, "/v5/chat/completions")  # where `model` names what serves the request
# A stream is read whole (tests/contract/fuzz.toml: max-stream-events) to be checked, so it is kept short.
DEFAULT_LIMITS = {"prompts": 8, "choices": 16, "stream_max_tokens": 16}
# The JSON the fake vendors answer a response_format with (tests/support/fakes/).
SAID = {"type": "object", "properties": {"said": {"type": "string"}}, "required": ["said"]}


@dataclass(frozen=True)
class Vendor:
    """The run's vendor: its name, the model cases ask for, the limits cases keep within, and its
    capability map (the adapter's support records for its options)."""

    name: str
    model: str
    limits: dict[str, int]
    capabilities: Capabilities
    chat_capabilities: Capabilities

    @classmethod
    def of(cls, spec: dict[str, Any]) -> Vendor:
        adapter, options = registry.options_of(VendorConfig(name=spec["name"], protocol=spec["protocol"],
                                                            options=spec["options"]))
        return cls(spec["name"], spec["model"], DEFAULT_LIMITS | spec["limits"], adapter.capabilities_of[Endpoint.COMPLETIONS](options),
                   adapter.capabilities_of[Endpoint.CHAT](options))


VENDOR = Vendor.of(json.loads(os.environ.get("FUZZ_VENDOR") or json.dumps(
    {"name": "fake", "protocol": "openai", "options": {"server": "openai"}, "model": "fake/fuzz-model",
     "limits": {}})))
ADMIN = "/v5/admin/"  # its calls are counted apart ("admin <mode> <status>"): tests/contract/test_contract.py
CHAT = "/v5/chat/completions"
ACCOUNT_LIMITS = "/v5/admin/limits/accounts/{account_id}"
RUN_ACCOUNT = "acct-a"  # every call's account (fuzz.py's x-selected-account-id)
NATIVE = "/v5/inference"
# The 400 codes POST /v5/inference documents (openapi.json: its 400's description names each): what
# a valid native request may be refused with.
NATIVE_CODES = frozenset(re.findall(r"`([a-z_]+)`", json.loads(
    (Path(__file__).parents[2] / "openapi.json").read_text())["paths"][NATIVE]["post"]["responses"]["400"][
    "description"])) - {"args", "code", "param", "model", "inference_configuration", "inference_path"}  # (not codes)
RESPONSES = "/v5/responses"
STATS = os.environ.get("FUZZ_STATS")  # a file that gets one line per call: "[<kind> ]<mode> <status>"
KEYS: dict[str, str] = json.loads(os.environ.get("FUZZ_KEYS") or "{}")


def _scope(operation) -> str:
    """The scope an operation's security requirement names ("" where it names none)."""
    scopes = [scope for requirement in operation.definition.raw.get("security") or ()
              for scopes in requirement.values() for scope in scopes]
    return scopes[0] if scopes else ""


if KEYS:

    @schemathesis.auth(cache_by_key=lambda case, context: _scope(context.operation))
    class ScopedKeys:
        """The key of the scope each operation needs (any key where it needs none), given as explicit
        authentication, which schemathesis's auth checks then take away and spoil on purpose."""

        def get(self, case, context):
            return KEYS.get(_scope(context.operation)) or KEYS.get("inference") or next(iter(KEYS.values()))

        def set(self, case, data, context):
            case.headers = {**(case.headers or {}), "x-api-key": data}


@schemathesis.hook
def map_case(context, case):
    meta = case.meta
    body = case.body
    if meta is None or not meta.generation.mode.is_positive:
        return case
    if case.headers and case.headers.get("x-gateway-cache") == "only-if-cached":
        del case.headers["x-gateway-cache"]  # the fuzzed gateway has no response cache: always its documented 504
    if not isinstance(body, dict):
        return case
    if case.operation.path == ACCOUNT_LIMITS and (case.path_parameters or {}).get("account_id") == RUN_ACCOUNT \
            and isinstance(body.get("models"), list):
        # An allow-list on the run's own account would refuse every later inference call of the run
        # (a 403 test_contract.py holds no valid call to); it is fuzzed on the other accounts.
        body["models"] = None
        return case
    if case.operation.path == NATIVE:
        steer_native(body)
    elif case.operation.path == RESPONSES:
        steer_responses(body)
    elif "messages" in body:
        steer_chat(body)
    else:
        steer(body)
    return case


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


@schemathesis.check
def native_refusals_are_documented(ctx, response, case):
    """A valid POST /v5/inference answered 400 says why with a code its operation documents, and names
    what it refuses for the endpoint's own rules."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or case.operation.path != NATIVE \
            or response.status_code != 400:
        return None
    error = json.loads(response.content).get("error") or {}
    if error.get("code") not in NATIVE_CODES:
        raise AssertionError(f"a valid native request was refused with an undocumented 400 {error.get('code')!r}: "
                             f"{error.get('message')}")
    if error["code"] in ("routing_in_args", "model_mismatch", "invalid_stream_flag", "invalid_output_bound",
                         "shared_vendor_state") and not str(error.get("param", "")).startswith("args."):
        raise AssertionError(f"a native refusal {error['code']} names no member of args: {error}")
    return None


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


@schemathesis.hook
def after_call(context, case, response):
    path = case.operation.path
    if STATS and case.meta is not None:
        mode = "positive" if case.meta.generation.mode.is_positive else "negative"
        kind = "" if path == COMPLETIONS else "chat " if path == CHAT else "responses " if path == RESPONSES \
            else "admin " if path.startswith(ADMIN) else "other "
        with open(STATS, "a") as stats:
            stats.write(f"{kind}{mode} {response.status_code}{_refusal_code(response)}\n")


def _refusal_code(response) -> str:
    """A 403's error code after its status (" 403 model_not_allowed"): the stateful phase may put
    limits on the very keys the run uses (an allow-list, a budget in dollars), whose refusals are
    right; a 403 for a scope or an account the key holds is not."""
    if response.status_code != 403:
        return ""
    try:
        return f" {response.json()['error']['code']}"
    except (ValueError, KeyError, TypeError):
        return " unexplained"


# -- the checks ------------------------------------------------------------------------------------
def refusable(body: dict[str, Any], vendor: Vendor = VENDOR) -> dict[str, str]:
    """The parameters of a valid request body that the vendor may refuse, with the error code that
    says why, read from its capability map."""
    caps = vendor.capabilities
    call = completion_call(CompletionRequest.model_validate(body), vendor.model.partition("/")[2])
    if call.best_of == call.n:
        call.best_of = None  # as many candidates as choices: nothing to rank, nothing asked of the vendor
    allowed = {}
    for name in used_parameters(call):
        found = verdict(caps, name)
        if found.kind == UNSUPPORTED:
            allowed[name] = "unsupported_parameter"
        elif isinstance(found.range, Range) and call.given(name) not in found.range:
            allowed[name] = "parameter_out_of_range"
    if call.echo and call.logprobs is not None and verdict(caps, "echo").kind == EMULATED:
        allowed["echo"] = "unsupported_parameter"
    return allowed


@schemathesis.check
def refusals_are_documented(ctx, response, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or case.operation.path != COMPLETIONS:
        return None
    if response.status_code != 400:
        return None
    body = json.loads(response.request.body)
    error = json.loads(response.content).get("error") or {}
    allowed = refusable(body)
    param, vendor, code = error.get("param"), error.get("vendor"), error.get("code")
    if vendor != VENDOR.name or param not in allowed or code != allowed[param]:
        raise AssertionError(f"a valid request was refused with 400 {code} (param {param!r}, vendor {vendor!r}: "
                             f"{error.get('message')}); vendor {VENDOR.name!r} may refuse only "
                             f"{allowed or 'nothing in it'}")
    return None


# What a schema-valid administrative body may still be refused for (422 `invalid_value`, naming the
# field: handlers/admin.py), what the schema cannot say, with how to tell that the body has it.
def _no_model(patterns: list[str]) -> bool:
    return any(not p.strip() or ("/" not in p and not any(c in p for c in "*?[")) for p in patterns)


def _unnamed(model: Any) -> bool:
    """A request's `model` that is neither `vendor/name` nor an alias (the fuzzed gateways configure none)."""
    vendor, _, name = str(model).partition("/")
    return not vendor or not name


def _no_budget(limits: dict[str, Any]) -> bool:  # (nor one stored, for a PUT)
    return not any(limits.get(f) is not None for f in ("budget_tokens", "budget_usd"))


# The fuzzed gateway's key cache lifetime (the default): a rotation's grace is 0 or at least that.
KEY_CACHE_SECONDS = math.ceil(Settings.model_fields["key_cache_seconds"].default)


def _finer(amount: Any, decimals: int) -> bool:
    """Whether an amount has more decimals than are kept (budgets 9, prices 6)."""
    scaled = Decimal(str(amount)) * 10**decimals
    return scaled != scaled.to_integral_value()


def _holds_nul(case, body: Any, loc: list[Any]) -> bool:
    """Whether the request's value at a problem's `loc` (["body", ...], ["path", name] or
    ["query", name]) holds a NUL character, or is the member of an object's key that does."""
    where, *steps = loc
    value = {"body": body, "path": case.path_parameters or {}, "query": case.query or {}}.get(where)
    for step in steps:
        if isinstance(step, str) and "\x00" in step:
            return True
        if isinstance(value, dict) and step in value:
            value = value[step]
        elif isinstance(value, list) and isinstance(step, int) and step < len(value):
            value = value[step]
        else:
            return False
    return isinstance(value, str) and "\x00" in value


UNUSABLE = {
    "expires_at": lambda body: usage.parse_instant(body["expires_at"]) <= datetime.now(UTC),
    "models": lambda body: _no_model(body["models"]),
    "period": _no_budget,
    "grace_seconds": lambda body: 0 < body["grace_seconds"] < KEY_CACHE_SECONDS,
    "budget_usd": lambda body: _finer(body["budget_usd"], 9),
    "limits.budget_usd": lambda body: _finer(body["limits"]["budget_usd"], 9),
    **{rate: (lambda body, rate=rate: _finer(body[rate], 6)) for rate in ("input", "output", "cached_input")},
    # A key made with its limits (POST /v5/admin/keys `limits`): the same faults, and the
    # allow-list given twice.
    "limits.models": lambda body: _no_model(body["limits"]["models"]) or body.get("models") is not None,
    "limits.period": lambda body: _no_budget(body["limits"]),
}


def _given(body: dict[str, Any], param: str) -> Any:
    for step in param.split("."):
        body = body.get(step) if isinstance(body, dict) else None
    return body


@schemathesis.check
def unusable_values_are_named(ctx, response, case):
    """A schema-valid request answered 422 (positive_data_acceptance lets 422 through to this check:
    tests/contract/fuzz.toml) passes only as an administrative value the schema allows but the
    gateway cannot use, the error naming the field and the body having that fault."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 422:
        return None
    answer = json.loads(response.content)
    error = answer.get("error") or {}
    body = json.loads(response.request.body) if response.request.body else {}
    param, code = error.get("param"), error.get("code")
    if case.operation.path in INFERENCE and (param, code) == ("model", "invalid_request_body") and \
            _unnamed(body.get("model")):
        return None
    if code == "invalid_value" and case.operation.path.startswith("/v5/admin/") and answer.get("detail") and all(
            _holds_nul(case, body, problem["loc"]) for problem in answer["detail"]):
        return None  # a NUL, which no administrative value may hold (handlers/admin.py)
    fault = UNUSABLE.get(param)
    if (not case.operation.path.startswith("/v5/admin/") or code != "invalid_value" or fault is None
            or _given(body, param) is None or not fault(body)):
        raise AssertionError(f"a valid request was refused with 422 {code} (param {param!r}: {error.get('message')})")
    return None


@schemathesis.check
def answers_keep_openais_contract(ctx, response, case):
    if case.operation.path != COMPLETIONS or response.status_code != 200 or response.stream_cut_short:
        return None
    request = json.loads(response.request.body)
    prompts = request["prompt"] if isinstance(request["prompt"], list) else [request["prompt"]]
    expected = len(prompts) * int(request.get("n") or 1)  # 3.0 is an integer too
    asked = request.get("logprobs")
    if response.headers.get("content-type", [""])[0].startswith("text/event-stream"):
        _check_stream(response.content.decode(), request, expected, asked)
        return None
    answer = json.loads(response.content)
    assert [c["index"] for c in answer["choices"]] == list(range(expected)), "one choice per prompt and n, in order"
    for choice in answer["choices"]:
        _check_logprobs(choice, asked)
    usage = answer.get("usage")
    assert usage is not None, "usage is always present"
    _check_usage(usage)
    estimated = response.headers.get("x-gateway-usage-estimated", [None])[0] == "true"
    assert usage.get("estimated", False) == estimated, "usage.estimated and x-gateway-usage-estimated disagree"
    return None


@schemathesis.check
def responses_carry_their_usage(ctx, response, case):
    """A 200 of POST /v5/responses: its usage always there and adding up; a stream's events numbered
    from 0, exactly one terminal event, last, carrying the whole response and its usage; no [DONE]."""
    if case.operation.path != RESPONSES or response.status_code != 200 or response.stream_cut_short:
        return None
    if response.headers.get("content-type", [""])[0].startswith("text/event-stream"):
        text = response.content.decode()
        assert "[DONE]" not in text, "a Responses stream has no [DONE]"
        events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
        assert [e["sequence_number"] for e in events] == list(range(len(events))), "sequence_number counts from 0"
        terminal = [e for e in events if e["type"] in ("response.completed", "response.incomplete", "response.failed")]
        assert len(terminal) == 1 and terminal[0] is events[-1], "exactly one terminal event, last"
        answer = terminal[0]["response"]
    else:
        answer = json.loads(response.content)
    usage = answer.get("usage")
    assert usage is not None, "usage is always present"
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"], "usage adds up"
    return None


def _check_stream(text: str, request: dict[str, Any], expected: int, asked: int | None) -> None:
    events = [block for block in text.split("\n\n") if block.strip()]
    assert events[-1] == "event: done\ndata: [DONE]", "a stream ends with [DONE]"
    chunks = [json.loads(block.removeprefix("data: ")) for block in events[:-1]]
    if any("error" in chunk for chunk in chunks):
        raise AssertionError(f"the stream failed: {chunks[-1]}")
    finishes: dict[int, int] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            assert 0 <= choice["index"] < expected, f"choice index {choice['index']} of {expected}"
            _check_logprobs(choice, asked, streamed=True)
            if choice["finish_reason"] is not None:
                finishes[choice["index"]] = finishes.get(choice["index"], 0) + 1
    assert finishes == dict.fromkeys(range(expected), 1), f"one finish_reason per choice: {finishes}"
    usage_chunks = [chunk for chunk in chunks if "usage" in chunk]
    if (request.get("stream_options") or {}).get("include_usage"):
        assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1] and chunks[-1]["choices"] == [], \
            "one usage chunk, the last one, when asked for"
        _check_usage(chunks[-1]["usage"])
    else:
        assert usage_chunks == [], "a usage chunk only when asked for"


def _check_logprobs(choice: dict[str, Any], asked: int | None, streamed: bool = False) -> None:
    assert "logprobs" in choice, "every choice has logprobs (null when not asked for)"
    logprobs = choice["logprobs"]
    if asked is None:
        assert logprobs is None, "logprobs were not asked for"
        return
    if logprobs is None:
        assert streamed, "logprobs were asked for"  # a stream's finish or echo piece may carry none
        return
    columns = [logprobs[key] for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset")]
    assert len({len(column) for column in columns}) == 1, "logprobs lists of one length"
    for token, logprob, top in zip(*columns[:3], strict=True):
        if top is None:
            continue  # the first token of an echoed prompt
        assert top.get(token) == logprob, f"top_logprobs {top} lacks the token {token!r} at {logprob}"
        assert len(top) <= asked + 1, f"more than logprobs + 1 entries: {top}"


def _check_usage(usage: dict[str, Any]) -> None:
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
