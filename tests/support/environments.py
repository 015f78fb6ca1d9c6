"""The gateways' environments as the tests run them: in front of the fake vendors (secrets the
fakes check, never to be leaked), with the real embedded model, and the vendor tests' table."""

from __future__ import annotations

import ssl

from gateway.core.endpoint import Endpoint
from gateway.core.config import VendorConfig
from gateway.vendors import registry

# The TLS context of every HTTP client in the tests (`verify=SHARED_TLS`). httpx otherwise builds
# one per client, loading a certificate store each time, which costs more CPU than most of the
# tests' requests to loopback servers (all plain HTTP).
SHARED_TLS = ssl.create_default_context()
UPSTREAM_SECRET = "sk-upstream-secret-never-leak"
ANTHROPIC_SECRET = "sk-ant-upstream-secret-never-leak"
GEMINI_SECRET = "AIza-upstream-secret-never-leak"
# The gateway with the real embedded model (tests/conftest.py's local_gateway).
LOCAL_MODEL = "local/smollm2-135m"
NO_EOS = {"0": -100, "2": -100}  # <|endoftext|> and <|im_end|> banned: generations run to max_tokens
LOCAL_PARALLEL = 2
LOCAL_CONTEXT = 1024
# One engine thread per model (GATEWAY_VENDOR_LOCAL_THREADS): the suite's two workers share the
# machine's cores, and llama.cpp's threads spin while they wait for each other, burning the CPU the
# other worker needs whenever they do not each have a core of their own.
LOCAL_THREADS = 1
# Seconds a client of the real model waits before giving up: a safety net for a busy machine (other
# streams queued for the model's slots, other processes), not a bound under test.
LOCAL_TIMEOUT = 300
# A loopback port nothing listens on: a vendor there is unreachable (connection refused).
UNREACHABLE_URL = "http://127.0.0.1:9/v1"


def local_env(database_url: str) -> dict[str, str]:
    """The environment of a gateway whose `local` vendor runs the real model, as the tests run it."""
    return {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_VENDOR_LOCAL_ENABLED": "1",
        "GATEWAY_VENDOR_LOCAL_PARALLEL": str(LOCAL_PARALLEL),
        "GATEWAY_VENDOR_LOCAL_CONTEXT_SIZE": str(LOCAL_CONTEXT),
        "GATEWAY_VENDOR_LOCAL_THREADS": str(LOCAL_THREADS),
        "GATEWAY_VALIDATE_RESPONSES": "1",
    }


def gateway_env(upstream_url: str, database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a gateway in front of the fake OpenAI-compatible vendor at `upstream_url`."""
    return {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_VENDOR_FAKE_PROTOCOL": "openai",
        "GATEWAY_VENDOR_FAKE_BASE_URL": f"{upstream_url}/v1",
        "GATEWAY_VENDOR_FAKE_API_KEY": UPSTREAM_SECRET,
        "GATEWAY_VENDOR_FAKE_SERVER": "openai",  # the fake implements the whole contract
        "GATEWAY_VENDOR_FAKE_FIRST_BYTE": "2",
        "GATEWAY_VENDOR_FAKE_IDLE": "2",
        "GATEWAY_VENDOR_FAKE_RETRIES": "0",  # tests/integration/test_faults.py covers retries with its own vendor
        # The same fake vendor with the default retry policy, for the fault tests.
        "GATEWAY_VENDOR_RETRYING_PROTOCOL": "openai",
        "GATEWAY_VENDOR_RETRYING_BASE_URL": f"{upstream_url}/v1",
        "GATEWAY_VENDOR_RETRYING_SERVER": "openai",
        "GATEWAY_VENDOR_RETRYING_FIRST_BYTE": "1",
        "GATEWAY_VENDOR_RETRYING_IDLE": "1",
        "GATEWAY_VENDOR_RETRYING_TOTAL": "2",
        # A vendor nobody answers for, with the default retry policy.
        "GATEWAY_VENDOR_DOWN_PROTOCOL": "openai",
        "GATEWAY_VENDOR_DOWN_BASE_URL": UNREACHABLE_URL,
        "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
        # A chain whose first fallback cannot serve (the vendor rejects it). One on a vendor that is not
        # configured is a startup error (tests/unit/test_config.py).
        "GATEWAY_FALLBACKS": "fake/fail-503=fake/fail-400,fake/backup",
        "GATEWAY_VALIDATE_RESPONSES": "1",
        **extra,
    }


VENDORS: dict[str, tuple[str, str, dict[str, str]]] = {
    "anthropic": ("anthropic", "anthropic", {}),
    "claude_user": ("anthropic", "anthropic", {"prompt_as": "user"}),
    "gemini": ("gemini", "gemini", {"max_candidates": "4"}),
    "gemini1": ("gemini", "gemini", {}),
    # An OpenAI-compatible server lacking everything the gateway can emulate.
    "bare": ("openai", "openai", {"server": "openai", "lacks": "prompt,n,echo,stop,best_of,user"}),
    # One that echoes natively but takes a single stop sequence.
    "fewstops": ("openai", "openai", {"server": "openai", "max_stop": "1"}),
    # A compatible server without the Responses API (vLLM's chat): /v5/responses is bridged through chat.
    "compat": ("openai", "openai", {"server": "vllm"}),
}


def vendor_config(name: str) -> VendorConfig:
    protocol, _, options = VENDORS[name]
    return VendorConfig(name=name, protocol=protocol, options=options)


def capabilities_of(name: str):
    adapter, options = registry.options_of(vendor_config(name))
    return adapter.capabilities_of[Endpoint.COMPLETIONS](options)
