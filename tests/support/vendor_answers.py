"""Hypothesis strategies for what vendors send: arbitrary JSON biased towards the fields of their
answers, and each protocol's answers and stream events, mostly well-formed with a value (or a
field) now and then wrong, so that both the readers' refusals and their results are explored
(tests/unit/test_vendor_parsers.py)."""

from __future__ import annotations

from hypothesis import strategies as st

from gateway.core.completion import MAX_USAGE_TOKENS, CompletionCall

KEY = "hv-Zq8Xv3Lp9Rt2Wm5Yb7Nc4Hd6Jf1Kg0Tz"  # the vendor's key; it shows up among the vendor's values

FIELDS = ["choices", "index", "text", "finish_reason", "logprobs", "content", "bytes", "logprob", "token",
          "top_logprobs", "tokens", "token_logprobs", "text_offset", "usage", "prompt_tokens", "completion_tokens",
          "prompt_tokens_details", "completion_tokens_details", "cached_tokens", "reasoning_tokens", "error",
          "message", "type", "delta", "stop_reason", "input_tokens", "output_tokens", "cache_read_input_tokens",
          "candidates", "parts", "thought", "finishReason", "usageMetadata", "promptTokenCount",
          "candidatesTokenCount", "thoughtsTokenCount", "logprobsResult", "chosenCandidates", "topCandidates",
          "logProbability", "promptFeedback", "blockReason", "system_fingerprint", "id"]  # fmt: skip
INTEGERS = st.one_of(st.integers(-3, 300), st.sampled_from([-5, 10**18, 10**30, 2**63, 2**64 - 1, 3 * 10**9,
                                                             MAX_USAGE_TOKENS, MAX_USAGE_TOKENS + 1]), st.integers())
TEXT = st.one_of(st.text(max_size=12), st.just(KEY), st.sampled_from(["stop", "length", "text_delta", "STOP",
                                                                      "message_stop", "error", "[DONE]"]))
SCALARS = st.one_of(st.none(), st.booleans(), INTEGERS, st.floats(allow_nan=False, allow_infinity=False), TEXT)
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.sampled_from(FIELDS), TEXT), inner, max_size=5)),
    max_leaves=25)


def maybe(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly a valid value, one time in ten anything."""
    return st.integers(0, 9).flatmap(lambda roll: JSON if roll == 9 else valid)


def fields(**values: st.SearchStrategy) -> st.SearchStrategy:
    """An object with these fields, each mostly valid, and now and then one of them missing."""
    present = st.fixed_dictionaries({name: maybe(v) for name, v in values.items()})
    missing = st.integers(0, 9).flatmap(lambda roll: st.sampled_from(sorted(values)) if roll == 9 else st.none())
    return st.tuples(present, missing).map(lambda drawn: {k: v for k, v in drawn[0].items() if k != drawn[1]})


COUNT = st.integers(0, 1000)
LOGPROB = st.floats(-20, 0)
ENGINE_ENTRY = fields(token=st.text(max_size=4), bytes=st.lists(st.integers(0, 255), max_size=6), logprob=LOGPROB,
                      top_logprobs=st.lists(fields(token=st.text(max_size=4), logprob=LOGPROB), max_size=3))
LEGACY = st.integers(0, 3).flatmap(lambda n: fields(
    tokens=st.lists(st.text(max_size=4), min_size=n, max_size=n),
    token_logprobs=st.lists(st.one_of(st.none(), LOGPROB), min_size=n, max_size=n),
    top_logprobs=st.lists(st.one_of(st.none(), st.dictionaries(st.text(max_size=4), LOGPROB, max_size=3)),
                          min_size=n, max_size=n),
    text_offset=st.lists(st.integers(0, 100), min_size=n, max_size=n)))
OPENAI_USAGE = fields(prompt_tokens=COUNT, completion_tokens=COUNT, prompt_tokens_details=fields(cached_tokens=COUNT),
                      completion_tokens_details=fields(reasoning_tokens=COUNT))
OPENAI_CHOICE = fields(index=st.integers(0, 2), text=st.text(max_size=8), finish_reason=st.sampled_from(["stop", None]),
                       logprobs=st.one_of(st.none(), LEGACY, fields(content=st.lists(ENGINE_ENTRY, max_size=3))))
OPENAI = fields(choices=st.lists(OPENAI_CHOICE, max_size=3, unique_by=lambda c: repr(c.get("index"))),
                usage=OPENAI_USAGE, system_fingerprint=st.text(max_size=8))
ANTHROPIC_USAGE = fields(input_tokens=COUNT, output_tokens=COUNT, cache_read_input_tokens=COUNT,
                         cache_creation_input_tokens=COUNT)
ANTHROPIC_MESSAGE = fields(content=st.lists(fields(type=st.just("text"), text=st.text(max_size=8)), max_size=3),
                           stop_reason=st.sampled_from(["end_turn", "max_tokens", "refusal"]), usage=ANTHROPIC_USAGE)
ANTHROPIC_EVENT = st.one_of(
    fields(type=st.just("content_block_delta"), delta=fields(type=st.just("text_delta"), text=st.text(max_size=8))),
    fields(type=st.just("message_start"), message=fields(usage=ANTHROPIC_USAGE)),
    fields(type=st.just("message_delta"), delta=fields(stop_reason=st.just("end_turn")), usage=ANTHROPIC_USAGE),
    fields(type=st.just("message_stop")), fields(type=st.just("error"), error=fields(type=TEXT, message=TEXT)),
    fields(type=st.just("ping")))
GEMINI_CANDIDATE = fields(
    index=st.integers(0, 2), finishReason=st.sampled_from(["STOP", "SAFETY", "MAX_TOKENS"]),
    content=fields(parts=st.lists(fields(text=st.text(max_size=8), thought=st.booleans()), max_size=2)),
    logprobsResult=fields(chosenCandidates=st.lists(fields(token=st.text(max_size=4), logProbability=LOGPROB),
                                                    max_size=3),
                          topCandidates=st.lists(fields(candidates=st.lists(
                              fields(token=st.text(max_size=4), logProbability=LOGPROB), max_size=3)), max_size=3)))
GEMINI = fields(candidates=st.lists(GEMINI_CANDIDATE, max_size=3), promptFeedback=fields(blockReason=st.just("SAFETY")),
                usageMetadata=fields(promptTokenCount=COUNT, candidatesTokenCount=COUNT, thoughtsTokenCount=COUNT,
                                     cachedContentTokenCount=COUNT))
CALLS = st.builds(lambda n, prompts, top: CompletionCall(model="m", prompts=["p"] * prompts, n=n, logprobs=top),
                  st.integers(1, 3), st.integers(1, 2), st.one_of(st.none(), st.integers(0, 5)))
