"""The endpoints of the v5 inference family the gateway serves, as one typed value.

Everything below a handler that must know which endpoint a request came through (the response
cache's key, the vendor call's span and the request's metrics, the limits' demand and the
ledger's row) holds an `Endpoint`, never a bare string: a misspelt endpoint fails where it is
written, and a new endpoint is one member here (with its operation name) that every place which
asks of it can be found from. A member is a `str` (StrEnum), so the ledger's `endpoint` column,
the cache's key and the metrics' labels hold the same words as before the type existed.
"""

from __future__ import annotations

from enum import StrEnum


class Endpoint(StrEnum):
    COMPLETIONS = "completions"  # POST /v5/completions
    CHAT = "chat"  # POST /v5/chat/completions
    RESPONSES = "responses"  # POST /v5/responses
    INFERENCE = "inference"  # POST /v5/inference: vendor-native payloads

    @property
    def path(self) -> str:
        """Where the contract serves it (POST)."""
        return _PATHS[self]

    @property
    def operation(self) -> str:
        """The endpoint's gen_ai.operation.name (OpenTelemetry's GenAI conventions): what its vendor
        calls' spans and its requests' metrics are labelled with."""
        return _OPERATIONS[self]


_OPERATIONS = {Endpoint.COMPLETIONS: "text_completion", Endpoint.CHAT: "chat", Endpoint.RESPONSES: "chat",
               Endpoint.INFERENCE: "generate_content"}
_PATHS = {Endpoint.COMPLETIONS: "/v5/completions", Endpoint.CHAT: "/v5/chat/completions",
          Endpoint.RESPONSES: "/v5/responses", Endpoint.INFERENCE: "/v5/inference"}
# The endpoints whose vendor calls are chat conversations (core/chat.py `ChatCall`): a Responses
# request is bridged to its vendor's chat translator, its choices held and cached as chat's.
CONVERSATIONS = frozenset({Endpoint.CHAT, Endpoint.RESPONSES})
