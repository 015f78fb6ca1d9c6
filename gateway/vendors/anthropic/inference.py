"""POST /v5/inference on the Anthropic protocol: the client's Messages API body, sent as it is
(the model the gateway's) to POST /v1/messages under the gateway's key and `anthropic-version`;
no beta header is sent, so no beta feature is asked for behind the operator's back."""

from __future__ import annotations

from gateway.core.inference import InferenceCall
from gateway.vendors.anthropic.messages import MESSAGES
from gateway.vendors.native import NativeTranslator


class AnthropicInference(NativeTranslator):
    def path(self, call: InferenceCall) -> str:
        return MESSAGES
