"""POST /v5/responses on a server of the OpenAI protocol that has the Responses API itself
(servers.py `responses_api`: OpenAI's own): the endpoint's body (endpoints/responses/native.py
`native_request`, stateless) sent to `{base_url}/responses`, its answer and its events handed back
as they came, for the endpoint to read (native.py `from_native`, `NativeStream`). A server without
it is asked through its chat translator instead (chat.py; adapter.py chooses)."""

from __future__ import annotations

from gateway.core.inference import InferenceCall
from gateway.core.responses import native_verdicts
from gateway.vendors.native import NativeTranslator

RESPONSES = "/responses"


class OpenAIResponses(NativeTranslator):
    # Each field of a Responses request as this translator serves it (GET /v5/vendors shows it).
    responses_fields = native_verdicts()

    def path(self, call: InferenceCall) -> str:
        return RESPONSES
