"""Schemathesis hooks for fuzzing the gateway (SCHEMATHESIS_HOOKS=tests.fuzz_hooks).

Positive cases must be requests the gateway can serve, so they are steered to the fuzz run's
vendor (`fake`, an OpenAI-compatible fake) and made to respect the one cross-field rule the
schema cannot express (best_of >= n, and the gateway's fan-out limit: prompts x max(n, best_of)
<= GATEWAY_MAX_CHOICES, default 2048). Negative cases are left alone.
"""

from __future__ import annotations

import schemathesis

FUZZ_MODEL = "fake/fuzz-model"
MAX_CHOICES = 2048


@schemathesis.hook
def map_case(context, case):
    meta = case.meta
    body = case.body
    if meta is None or not meta.generation.mode.is_positive or not isinstance(body, dict):
        return case
    if isinstance(body.get("model"), str):
        body["model"] = FUZZ_MODEL
    prompts = len(body["prompt"]) if isinstance(body.get("prompt"), list) else 1
    if isinstance(body.get("n"), int | float) and prompts * body["n"] > MAX_CHOICES:
        body["n"] = MAX_CHOICES // prompts
    n, best_of = body.get("n"), body.get("best_of")
    if isinstance(n, int | float) and isinstance(best_of, int | float) and best_of < n:  # 65.0 is an integer too
        if n <= 20 and body.get("stream") is not True and prompts * n <= MAX_CHOICES:  # best_of max 20; streams: 1
            body["best_of"] = n
        else:
            del body["best_of"]
    elif isinstance(best_of, int | float) and prompts * best_of > MAX_CHOICES:
        del body["best_of"]
    return case
