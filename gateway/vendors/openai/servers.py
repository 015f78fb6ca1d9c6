"""What OpenAI-compatible servers do with the legacy completions contract, and how the gateway
tells which server a vendor is.

The `openai` protocol is spoken by OpenAI and by many servers that implement part of it. What a
server ignores silently cannot be seen in its answers (llama.cpp's server answers `suffix` as if
it were absent), and some of what it gets wrong cannot be corrected afterwards (its usage covers
one prompt and one choice, whatever the request asked for). So the gateway learns which server it
talks to before it plans a request, and plans around what that server does: a parameter it ignores
is emulated or refused by name, and a server whose usage covers one task is sent one task per call.

A vendor's `server` option names the server, or is `auto` (the default): the gateway then asks
each deployment `GET {base_url}/models` when it starts, and reads the server's own name from the
answer (`owned_by`) or its `Server` header. Until a server is identified (it was down, or says
nothing known) the gateway assumes the least: `UNIDENTIFIED`, as cautious as the most limited
server known. What each entry says, and how it was learnt, is in docs/vendors.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, NonNegativeInt, field_validator

from gateway.vendors.server_paths import ServerPath
from gateway.core.config import Names
from gateway.core.parameters import CHAT_PARAMETERS, PARAMETERS


@dataclass(frozen=True, slots=True)
class Server:
    """One OpenAI-compatible server's conduct on /v1/completions."""

    name: str  # as the `server` option names it
    title: str  # as its makers write it
    # Request parameters it ignores, or refuses although the contract has them: emulated where the
    # gateway can, else refused with a 400 naming them (gateway/vendors/openai/completions.py `capabilities`).
    lacks: frozenset[str] = frozenset()
    # A call serves one prompt and one choice, or its usage counts only one of them: the gateway
    # sends each prompt and each choice in a call of its own (fanned out by the planner).
    one_task_per_call: bool = False
    # `max_tokens: 0` generates nothing (else the gateway asks for 1 token and drops it).
    zero_max_tokens: bool = False
    # `logprobs: 0` returns the sampled tokens' logprobs (else the gateway asks for 1 and keeps the
    # sampled token alone, which is what 0 means).
    zero_logprobs: bool = False
    # Chat parameters it ignores (its /v1/chat/completions), emulated or refused as `lacks` are;
    # OpenAI's own chat features are refused for every compatible server (vendors/openai/chat.py).
    chat_lacks: frozenset[str] = frozenset()
    # Chat parameters it takes under another name (the contract's: its own), sent under that name.
    chat_names: Mapping[str, str] = field(default_factory=dict, hash=False)
    # It has OpenAI's Responses API (`/responses`): a Responses request is sent as one
    # (vendors/openai/responses.py), else bridged through its chat (endpoints/responses/request.py).
    responses_api: bool = False
    # How the gateway knows (docs/vendors.md has the detail).
    known_from: str = ""


# The contract is OpenAI's own protocol: OpenAI serves all of it.
OPENAI = Server("openai", "OpenAI", zero_max_tokens=True, zero_logprobs=True, responses_api=True,
                known_from="the contract is its protocol")
LLAMA_CPP = Server("llama.cpp", "llama.cpp", lacks=frozenset({"echo", "suffix", "best_of", "user"}),
                   one_task_per_call=True, known_from="measured (tests/integration/test_llamacpp_upstream.py)")
VLLM = Server("vllm", "vLLM", lacks=frozenset({"best_of", "suffix", "user"}), zero_logprobs=True,
              known_from="read in its source, not run here")
# SGLang's logprobs carry no text offsets (-1): refused by name rather than failed as malformed.
SGLANG = Server("sglang", "SGLang", lacks=frozenset({"best_of", "suffix", "user", "logprobs"}),
                known_from="read in its source, not run here")
# Ollama's documentation lists the fields its compatibility layer takes ("Supported request fields").
OLLAMA_CHAT_LACKS = frozenset({"logit_bias", "logprobs", "top_logprobs", "n", "top_k", "tool_choice",
                               "parallel_tool_calls"})
# Its chat takes `max_tokens` and not `max_completion_tokens`, OpenAI's newer name for the same bound
# (Ollama reads it as `num_predict`: every token generated, thinking included, which is what
# max_completion_tokens bounds), so the one is sent as the other; every compatible server takes it.
MAX_TOKENS_NAME = {"max_completion_tokens": "max_tokens"}
OLLAMA = Server("ollama", "Ollama", lacks=frozenset({"echo", "best_of", "logit_bias", "logprobs", "user"}),
                one_task_per_call=True, chat_lacks=OLLAMA_CHAT_LACKS, chat_names=MAX_TOKENS_NAME,
                known_from="read in its source and documentation, not run here")
# A server the gateway could not identify is assumed to lack what any compatible server it knows
# lacks (Hugging Face TGI, which says nothing of itself, among them): nothing is accepted and then
# ignored, and usage is exact whatever the server turns out to be. Logprobs and echo are checked
# on every answer anyway (planner/verify.py); the rest cannot be seen in an answer.
UNIDENTIFIED = Server(
    "unidentified",
    "an unidentified server",
    lacks=frozenset({"echo", "suffix", "best_of", "user", "logit_bias", "presence_penalty"}),
    one_task_per_call=True,
    chat_lacks=OLLAMA_CHAT_LACKS,
    chat_names=MAX_TOKENS_NAME,
    known_from="not identified: assumed to lack what the compatible servers known lack",
)

SERVERS: dict[str, Server] = {server.name: server for server in (OPENAI, LLAMA_CPP, VLLM, SGLANG, OLLAMA,
                                                                 UNIDENTIFIED)}
# What `server` may name in a vendor's configuration besides a server: `auto`, identify it.
AUTO = "auto"
# `owned_by` in a /models answer, and the start of a `Server` header, as each server writes it
# (Ollama writes a model's namespace, "library" for its own models).
_OWNED_BY = {"llamacpp": LLAMA_CPP, "vllm": VLLM, "sglang": SGLANG, "library": OLLAMA}
_SERVER_HEADERS = {"llama.cpp": LLAMA_CPP}
# Hosts that are OpenAI itself: no need to ask.
_OPENAI_HOSTS = frozenset({"api.openai.com"})


def lacking(server: Server) -> str:
    """Why a parameter the server lacks is refused (the gateway cannot emulate it)."""
    if server is UNIDENTIFIED:
        return ("the server could not be identified, and compatible servers ignore it; if this one implements it, "
                "name the server in the vendor's `server` option (e.g. openai)")
    return f"{server.title}'s server does not implement it, and the gateway cannot emulate it"


def declared(setting: str, base_urls: Iterable[str]) -> Server | None:
    """The server a vendor's configuration names (None: `auto`, to be identified), or OpenAI's for
    a vendor whose every deployment is OpenAI's own API."""
    if setting != AUTO:
        return SERVERS[setting]
    hosts = {urlsplit(url).hostname for url in base_urls}
    return OPENAI if hosts and hosts <= _OPENAI_HOSTS else None


def identify(server_header: str | None, models: Any) -> Server | None:
    """The server a deployment is, from its answer to GET /models (the decoded JSON, or None) and
    its `Server` header; None when neither names a known one."""
    if isinstance(models, Mapping) and isinstance(models.get("data"), list):
        for model in models["data"][:64]:
            owner = model.get("owned_by") if isinstance(model, Mapping) else None
            if isinstance(owner, str) and owner in _OWNED_BY:
                return _OWNED_BY[owner]
    if server_header:
        for prefix, server in _SERVER_HEADERS.items():
            if server_header.lower().startswith(prefix):
                return server
    return None


def agreed(found: list[Server | None]) -> Server | None:
    """The server of a vendor whose deployments answered `found` (one entry each): theirs when
    they all agree, else None (deployments of one vendor that differ are not trusted to do more
    than the least of them)."""
    names = {server.name if server else None for server in found}
    return found[0] if len(names) == 1 else None


class OpenAIOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Which server it is (vendors/openai/servers.py): "auto" finds out as the gateway starts.
    server: str = AUTO
    lacks: Names = frozenset()  # request parameters (or "prompt" for list prompts) the server does not implement
    # Stop sequences it takes per request (0: none); more are matched by the gateway.
    max_stop: NonNegativeInt | None = None
    # Where POST /v5/inference sends the client's body instead of /chat/completions (a compatible
    # server's own API: llama.cpp's /completion; /responses), under the base URL, checked like an
    # http vendor's path (vendors/http_server/options.py).
    inference_path: ServerPath | None = None

    @field_validator("server")
    @classmethod
    def _server(cls, server: str) -> str:
        if server != AUTO and server not in SERVERS:
            raise ValueError(f"names no known server (known: {', '.join([AUTO, *SERVERS])})")
        return server

    @field_validator("lacks")
    @classmethod
    def _known(cls, lacks: frozenset[str]) -> frozenset[str]:
        unknown = lacks - set(PARAMETERS) - set(CHAT_PARAMETERS) - set(CHAT_PARAMETERS)
        if unknown:
            raise ValueError(f"names unknown parameters: {', '.join(sorted(unknown))}")
        return lacks
