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

The hooks are here; the run's vendor in tests/contract/fuzz_vendor.py, the steering per endpoint in
tests/contract/fuzz_steer.py, the checks in tests/contract/fuzz_checks.py (imported here, which
registers them with schemathesis).
"""

from __future__ import annotations

import schemathesis

import tests.contract.fuzz_checks  # noqa: F401  (registers the checks)
from tests.contract.fuzz_steer import steer, steer_chat, steer_native, steer_responses
from tests.contract.fuzz_vendor import (ACCOUNT_LIMITS, ADMIN, CHAT, COMPLETIONS, KEYS, NATIVE, RESPONSES, RUN_ACCOUNT,
                                        STATS)


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
