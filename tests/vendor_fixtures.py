"""One gateway in front of fake Anthropic, Gemini and OpenAI-compatible vendors, configured as
several vendors each (`VENDORS`), for the vendor and emulation tests. Import the fixtures you use.

Every fake checks the requests it gets against its vendor's documented shape; a test using
`vclient` fails when the gateway broke it."""

from __future__ import annotations

import httpx
import pytest

from gateway.core.config import VendorConfig
from gateway.vendors import registry
from tests.conftest import gateway_env
from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.gemini_upstream import FakeGemini
from tests.fakes.server import serve
from tests.gateway_process import GatewayProcess

ANTHROPIC_SECRET = "sk-ant-upstream-secret-never-leak"
GEMINI_SECRET = "AIza-upstream-secret-never-leak"

# name -> (protocol, fake, options). The capability tests read the same table.
VENDORS: dict[str, tuple[str, str, dict[str, str]]] = {
    "anthropic": ("anthropic", "anthropic", {}),
    "claude_user": ("anthropic", "anthropic", {"prompt_as": "user"}),
    "gemini": ("gemini", "gemini", {"max_candidates": "4"}),
    "gemini1": ("gemini", "gemini", {}),
    # An OpenAI-compatible server lacking everything the gateway can emulate.
    "lean": ("openai", "openai", {"lacks": "prompt,n,echo,stop,best_of,user"}),
    # One that echoes natively but takes a single stop sequence.
    "fewstops": ("openai", "openai", {"max_stop": "1"}),
}


def vendor_config(name: str) -> VendorConfig:
    protocol, _, options = VENDORS[name]
    return VendorConfig(name=name, protocol=protocol, options=options)


def capabilities_of(name: str):
    adapter, options = registry.options_of(vendor_config(name))
    return adapter.capabilities_of(options)


@pytest.fixture(scope="session")
def anthropic_upstream():
    yield from serve(FakeAnthropic())


@pytest.fixture(scope="session")
def gemini_upstream():
    yield from serve(FakeGemini())


@pytest.fixture(scope="session")
def vendors_gateway(upstream, anthropic_upstream, gemini_upstream, database):
    urls = {"anthropic": anthropic_upstream.url, "gemini": f"{gemini_upstream.url}/v1beta",
            "openai": f"{upstream.url}/v1"}  # fmt: skip
    keys = {"anthropic": ANTHROPIC_SECRET, "gemini": GEMINI_SECRET, "openai": "sk-openai-compatible"}
    env = gateway_env(upstream.url, database.url)
    for name, (protocol, fake, options) in VENDORS.items():
        prefix = f"GATEWAY_VENDOR_{name.upper()}_"
        env |= {prefix + "PROTOCOL": protocol, prefix + "BASE_URL": urls[fake], prefix + "API_KEY": keys[fake],
                prefix + "FIRST_BYTE": "2", prefix + "IDLE": "2"}  # fmt: skip
        env |= {prefix + option.upper(): value for option, value in options.items()}
    with GatewayProcess(env) as process:
        yield process


@pytest.fixture
def vclient(vendors_gateway, upstream, anthropic_upstream, gemini_upstream, database):
    upstream.requests.clear()
    anthropic_upstream.clear()
    gemini_upstream.clear()
    with httpx.Client(base_url=vendors_gateway.url, headers={"x-api-key": database.key}, timeout=30) as c:
        yield c
    assert anthropic_upstream.violations == [] and gemini_upstream.violations == []
