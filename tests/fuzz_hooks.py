"""Schemathesis hooks for fuzzing the gateway (SCHEMATHESIS_HOOKS=tests.fuzz_hooks).

Positive cases must be requests the gateway can serve, so they are steered to the fuzz run's
vendor (`fake`, an OpenAI-compatible fake that serves every parameter in one call) and made to
respect the one cross-field rule the schema cannot express: best_of >= n. Negative cases are left
alone.
"""

from __future__ import annotations

import schemathesis

FUZZ_MODEL = "fake/fuzz-model"
BEST_OF_MAX = 20  # openapi.json: best_of maximum


@schemathesis.hook
def map_case(context, case):
    meta = case.meta
    body = case.body
    if meta is None or not meta.generation.mode.is_positive or not isinstance(body, dict):
        return case
    if isinstance(body.get("model"), str):
        body["model"] = FUZZ_MODEL
    n, best_of = body.get("n"), body.get("best_of")
    if isinstance(n, int | float) and isinstance(best_of, int | float) and best_of < n:  # 65.0 is an integer too
        if n <= BEST_OF_MAX and body.get("stream") is not True:  # a stream allows best_of 1 only
            body["best_of"] = n
        else:
            del body["best_of"]
    return case
