"""What each OpenAI-compatible server the gateway knows takes on `/v1/completions` and
`/v1/chat/completions`, for the fake OpenAI server (tests/support/fakes/openai_upstream.py
`FakeOpenAI(server=...)`) to refuse the rest.

Written from each server's own documentation and source, and from llama.cpp's server run here,
not from the gateway's declarations (gateway/vendors/openai/servers.py), so that a parameter the
gateway declares native for a server that does not take it fails a test
(tests/integration/test_native_parameters.py). A field listed is one the server honours: one it
accepts and ignores (vLLM's `user`, llama.cpp's `echo`) is left out.

Real servers other than OpenAI's accept a field they do not know and ignore it (vLLM logs it,
llama.cpp and Ollama say nothing): the fakes refuse it instead, in the server's own error shape,
since an ignored field is exactly what the gateway promises never to let through.

Sources (read 2026-12):
- OpenAI: the API reference of both endpoints; an unknown field is a 400 "Unrecognized request
  argument supplied: <name>" (`invalid_request_error`); its chat API has no `top_k`.
- llama.cpp: measured here on xllamacpp's server (tests/integration/test_llamacpp_parameters.py;
  /work/shared/ARCHITECTURE.md): it ignores `echo`, `suffix`, `best_of` and `user`, serves `n`
  and list prompts but counts the usage of one task only, on chat too; errors are
  `{"error": {"code", "message", "type"}}`; `/v1/models` says `owned_by: llamacpp`.
- vLLM: vllm/entrypoints/openai/{completion,chat_completion}/protocol.py: no `best_of` (the V1
  engine dropped it), `suffix` refused by its serving code, `user` "ignored by vLLM"; OpenAI's
  own chat features (audio, prediction, store, metadata...) not there; errors
  `{"error": {"message", "type": "BadRequestError", "param", "code": 400}}`.
- SGLang: python/sglang/srt/entrypoints/openai/protocol.py: like vLLM; its completion logprobs
  carry no text offsets (so not honoured as OpenAI's); errors `{"object": "error", "message",
  "type", "param", "code"}`.
- Ollama: docs/api/openai-compatibility.mdx, "Supported request fields": completions without
  `best_of`, `echo`, `logit_bias`, `user`, `n`, logprobs, and a string prompt only; chat without
  `tool_choice`, `logit_bias`, `user`, `n`, logprobs, `max_completion_tokens`, `top_k`;
  `/v1/models` says `owned_by: library`.
- `unidentified`: a server that names none of these (Hugging Face TGI names its model's owner),
  taking only what every one of them takes, and `logprobs` on completions (a server that lacks it
  answers without, which the gateway checks on every answer: gateway/planner/verify.py); errors as
  TGI's, `422 {"error", "error_type": "validation"}`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# What the gateway itself sends with every request: the model, the prompt or messages, and a
# stream's usage request.
_BASE = frozenset({"model", "max_tokens", "stream", "stream_options"})
_SAMPLING = frozenset({"frequency_penalty", "presence_penalty", "seed", "stop", "temperature", "top_p"})
_CHAT_TOOLS = frozenset({"tools", "tool_choice", "parallel_tool_calls"})
_CHAT_COMMON = frozenset({"messages", "logit_bias", "logprobs", "top_logprobs", "max_completion_tokens", "n",
                          "response_format"}) | _CHAT_TOOLS  # fmt: skip


def _openai_error(message: str) -> tuple[int, dict[str, Any]]:
    return 400, {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}


def _llamacpp_error(message: str) -> tuple[int, dict[str, Any]]:
    return 400, {"error": {"code": 400, "message": message, "type": "invalid_request_error"}}


def _vllm_error(message: str) -> tuple[int, dict[str, Any]]:
    return 400, {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}


def _sglang_error(message: str) -> tuple[int, dict[str, Any]]:
    return 400, {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}


def _tgi_error(message: str) -> tuple[int, dict[str, Any]]:
    return 422, {"error": message, "error_type": "validation"}


@dataclass(frozen=True)
class Profile:
    """One server: the fields it honours per endpoint, and how it answers and refuses."""

    name: str  # as the gateway's `server` option names it
    owned_by: str  # in its GET /v1/models answer, which the gateway identifies it by
    completions: frozenset[str]
    chat: frozenset[str]
    refusal: Callable[[str], tuple[int, dict[str, Any]]]  # (status, body) of a 400 with this message
    one_task_usage: bool = False  # usage counts one prompt and one choice, whatever was asked
    string_prompt: bool = False  # a prompt is one string, never a list

    def unknown(self, endpoint: str, request: dict[str, Any]) -> list[str]:
        """The fields of `request` this server does not take on `endpoint` ("completions" or "chat")."""
        taken = self.completions if endpoint == "completions" else self.chat
        return sorted(set(request) - taken)

    def refuse(self, fields: list[str]) -> tuple[int, dict[str, Any]]:
        names = ", ".join(fields)
        if self.name == "openai":
            return self.refusal(f"Unrecognized request argument supplied: {names}")
        return self.refusal(f"{self.name} (fake) does not take {names}: the real server would ignore it")


OPENAI = Profile(
    "openai", "system",
    completions=_BASE | _SAMPLING | {"prompt", "best_of", "echo", "logit_bias", "logprobs", "n", "suffix", "user"},
    chat=_BASE | _SAMPLING | _CHAT_COMMON | {
        "audio", "functions", "function_call", "metadata", "modalities", "prediction", "reasoning_effort",
        "service_tier", "store", "user", "web_search_options", "verbosity", "prompt_cache_key", "safety_identifier"},
    refusal=_openai_error,
)  # fmt: skip
LLAMA_CPP = Profile(
    "llama.cpp", "llamacpp",
    completions=_BASE | _SAMPLING | {"prompt", "logit_bias", "logprobs", "n", "top_k"},
    chat=_BASE | _SAMPLING | _CHAT_COMMON | {"top_k"},
    refusal=_llamacpp_error, one_task_usage=True,
)  # fmt: skip
VLLM = Profile(
    "vllm", "vllm",
    completions=_BASE | _SAMPLING | {"prompt", "echo", "logit_bias", "logprobs", "n", "top_k", "response_format"},
    chat=_BASE | _SAMPLING | _CHAT_COMMON | {"top_k", "reasoning_effort"},
    refusal=_vllm_error,
)  # fmt: skip
SGLANG = Profile(
    "sglang", "sglang",
    completions=_BASE | _SAMPLING | {"prompt", "echo", "logit_bias", "n", "top_k", "response_format"},
    chat=_BASE | _SAMPLING | _CHAT_COMMON | {"top_k", "reasoning_effort"},
    refusal=_sglang_error,
)  # fmt: skip
OLLAMA = Profile(
    "ollama", "library",
    completions=_BASE | _SAMPLING | {"prompt", "suffix"},
    chat=_BASE | _SAMPLING | {"messages", "response_format", "tools", "reasoning_effort"},
    refusal=_openai_error, string_prompt=True,
)  # fmt: skip
_COMPATIBLE = (LLAMA_CPP, VLLM, SGLANG, OLLAMA)
UNIDENTIFIED = Profile(
    "unidentified", "meta-llama",
    completions=frozenset.intersection(*(p.completions for p in _COMPATIBLE)) | {"logprobs"},
    chat=frozenset.intersection(*(p.chat for p in _COMPATIBLE)),
    refusal=_tgi_error, one_task_usage=True, string_prompt=True,
)  # fmt: skip

PROFILES: dict[str, Profile] = {p.name: p for p in (OPENAI, LLAMA_CPP, VLLM, SGLANG, OLLAMA, UNIDENTIFIED)}
