"""The fuzz run's own checks, beside schemathesis's (registered when tests/contract/fuzz_hooks.py
imports this module; that module's docstring says what each holds)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import schemathesis

from gateway.core.config import Settings
from gateway.core.parameters import EMULATED, UNSUPPORTED, Range
from gateway.planner.capabilities import used_parameters, verdict
from gateway.endpoints.completions.plan import completion_call
from gateway.store import usage
from generated.models import CompletionRequest
from tests.contract.fuzz_vendor import COMPLETIONS, INFERENCE, VENDOR, NATIVE, NATIVE_CODES, RESPONSES, Vendor

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
