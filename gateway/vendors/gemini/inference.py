"""POST /v5/inference on the Gemini protocol: the client's GenerateContentRequest, sent as it is to
`models/{model}:generateContent`, or streamed from `:streamGenerateContent?alt=sse` (the stream
flag is the gateway's, never in Gemini's body: endpoints/inference/wires.py)."""

from __future__ import annotations

from gateway.core.inference import InferenceCall
from gateway.vendors.gemini.wire import url
from gateway.vendors.native import NativeTranslator


class GeminiInference(NativeTranslator):
    def path(self, call: InferenceCall) -> str:
        return url(call.model, "generateContent")

    def stream_path(self, call: InferenceCall) -> str:
        return url(call.model, "streamGenerateContent") + "?alt=sse"
