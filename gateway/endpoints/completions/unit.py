"""The completions endpoint's unit (endpoints/unit.py `EndpointUnit`): the request is the
contract's `CompletionRequest` as it is (the schema says its rules; `best_of` below `n` is the
planner's 422), planned by planner/plan.py, its demand the fan-out of that plan, its answer a
`text_completion` (answer.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import MISSING

from gateway.core.clearance import Clearance
from gateway.core.completion import DEFAULT_MAX_TOKENS, Result, Usage
from gateway.core.demand import Demand
from gateway.core.endpoint import Endpoint
from gateway.endpoints import unit
from gateway.endpoints.completions import answer
from gateway.endpoints.completions import plan as planning
from gateway.planner.plan import Plan
from gateway.vendors.registry import Registry
from generated.models import CompletionRequest

# The contract's defaults (openapi.json), left out of the cache's canonical form like a field not given.
DEFAULTS = {"max_tokens": DEFAULT_MAX_TOKENS, "n": 1, "temperature": 1, "top_p": 1, "frequency_penalty": 0,
            "presence_penalty": 0, "echo": False, "logit_bias": {}, "stop": []}


class Completions:
    endpoint = Endpoint.COMPLETIONS
    id_prefix = "cmpl-"
    answer_object = "text_completion"
    chunk_object = "text_completion"

    def accepted(self, request: CompletionRequest) -> CompletionRequest:
        return request

    def cache_form(self, asked: CompletionRequest) -> Mapping[str, Any]:
        return unit.cache_form(asked.model_dump(by_alias=True), DEFAULTS)

    def plan(self, asked: CompletionRequest, model: str, registry: Registry, max_vendor_calls: int,
             clearance: Clearance) -> Plan:
        request = asked if model == asked.model else asked.model_copy(update={"model": model})
        return planning.plan(request, registry, max_vendor_calls, clearance)

    def demand(self, asked: CompletionRequest, plan: Plan | None, falls_back: bool) -> Demand:
        """What a completion request can cost at most, as the vendor calls bill it: every vendor
        call's prompts (counted, when a limit asks, with the offline counter the ledger estimates
        with, store/tokens.py), plus max_tokens for every choice each call generates (best_of
        candidates included). Without `plan` (the planner refused it, or a fallback chain may serve
        it on a vendor that fans out differently) the bound holds for any vendor: one call per
        choice, each carrying its prompt. docs/limits.md states the estimate's error."""
        if plan is not None and not falls_back:
            attempt = plan.attempt()
            sent: Sequence[str] = attempt.prompts_sent
            completion = attempt.max_completion_tokens or 0
        else:
            prompt = asked.prompt
            prompts = [prompt] if isinstance(prompt, str) else list(prompt.root)
            choices = max(_value(asked.n, 1), _value(asked.best_of, 1))
            sent = [p for p in prompts for _ in range(choices)]
            completion = _value(asked.max_tokens, DEFAULT_MAX_TOKENS) * choices * len(prompts)
        return Demand(Endpoint.COMPLETIONS, asked.model, sent, completion, bool(_value(asked.stream, False)),
                      _value(asked.user, None))

    def body(self, head: Mapping[str, Any], plan: Plan, result: Result, usage: Usage) -> bytes:
        return answer.body(head, result, usage)

    def shape(self) -> answer.Shape:
        return answer.SHAPE


def _value(value: Any, default: Any) -> Any:
    """A request field's value, or `default` when it is absent or null (null means "not set")."""
    return default if value is MISSING or value is None else value


UNIT = Completions()
