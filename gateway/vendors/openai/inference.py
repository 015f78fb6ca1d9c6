"""POST /v5/inference on the OpenAI protocol: the client's chat completions body, sent as it is
(the model the gateway's) to `{base_url}/chat/completions`, or to the path the vendor's
`inference_path` option names (a compatible server's own API, e.g. llama.cpp's `/completion`)."""

from __future__ import annotations

from gateway.core.inference import InferenceCall
from gateway.vendors.native import NativeTranslator
from gateway.vendors.openai.chat import CHAT_COMPLETIONS
from gateway.vendors.transport.http import HttpAdapter


class OpenAIInference(NativeTranslator):
    def __init__(self, adapter: HttpAdapter, path: str | None) -> None:
        super().__init__(adapter)
        self._path = path or CHAT_COMPLETIONS

    def path(self, call: InferenceCall) -> str:
        return self._path
