"""The fuzz run's vendor and the paths and codes the hooks go by (tests/contract/fuzz_hooks.py):
FUZZ_VENDOR (JSON: its name, protocol, options, the model to ask for, and the limits cases keep
within), read once, with its capability maps; FUZZ_KEYS and FUZZ_STATS as fuzz.py sets them."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.core.endpoint import Endpoint
from gateway.core.config import VendorConfig
from gateway.core.parameters import Capabilities
from gateway.vendors import registry

BEST_OF_MAX = 20  # openapi.json: best_of maximum
COMPLETIONS = "/v5/completions"
INFERENCE = (COMPLETIONS, "/v5/chat/completions")  # where `model` names what serves the request
# A stream is read whole (tests/contract/fuzz.toml: max-stream-events) to be checked, so it is kept short.
DEFAULT_LIMITS = {"prompts": 8, "choices": 16, "stream_max_tokens": 16}
# The JSON the fake vendors answer a response_format with (tests/support/fakes/).
SAID = {"type": "object", "properties": {"said": {"type": "string"}}, "required": ["said"]}


@dataclass(frozen=True)
class Vendor:
    """The run's vendor: its name, the model cases ask for, the limits cases keep within, and its
    capability map (the adapter's support records for its options)."""

    name: str
    model: str
    limits: dict[str, int]
    capabilities: Capabilities
    chat_capabilities: Capabilities

    @classmethod
    def of(cls, spec: dict[str, Any]) -> Vendor:
        adapter, options = registry.options_of(VendorConfig(name=spec["name"], protocol=spec["protocol"],
                                                            options=spec["options"]))
        capabilities = adapter.capabilities_of
        return cls(spec["name"], spec["model"], DEFAULT_LIMITS | spec["limits"],
                   capabilities[Endpoint.COMPLETIONS](options), capabilities[Endpoint.CHAT](options))


VENDOR = Vendor.of(json.loads(os.environ.get("FUZZ_VENDOR") or json.dumps(
    {"name": "fake", "protocol": "openai", "options": {"server": "openai"}, "model": "fake/fuzz-model",
     "limits": {}})))
ADMIN = "/v5/admin/"  # its calls are counted apart ("admin <mode> <status>"): tests/contract/test_contract.py
CHAT = "/v5/chat/completions"
ACCOUNT_LIMITS = "/v5/admin/limits/accounts/{account_id}"
RUN_ACCOUNT = "acct-a"  # every call's account (fuzz.py's x-selected-account-id)
NATIVE = "/v5/inference"
# The 400 codes POST /v5/inference documents (openapi.json: its 400's description names each): what
# a valid native request may be refused with.
NATIVE_CODES = frozenset(re.findall(r"`([a-z_]+)`", json.loads(
    (Path(__file__).parents[2] / "openapi.json").read_text())["paths"][NATIVE]["post"]["responses"]["400"][
    "description"])) - {"args", "code", "param", "model", "inference_configuration", "inference_path"}  # (not codes)
RESPONSES = "/v5/responses"
STATS = os.environ.get("FUZZ_STATS")  # a file that gets one line per call: "[<kind> ]<mode> <status>"
KEYS: dict[str, str] = json.loads(os.environ.get("FUZZ_KEYS") or "{}")
