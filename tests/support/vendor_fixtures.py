"""A pytest plugin (named in tests/conftest.py): one gateway in front of fake Anthropic, Gemini and
OpenAI-compatible vendors, configured as several vendors each (tests/support/'s `VENDORS`), for
the vendor, capability and emulation tests.

Every fake checks the requests it gets against its vendor's documented shape; a test using
`vclient` fails when the gateway broke it."""

from __future__ import annotations

import httpx
import pytest

from tests.support.environments import ANTHROPIC_SECRET, GEMINI_SECRET, SHARED_TLS, VENDORS, gateway_env
from tests.support.fakes.anthropic_upstream import FakeAnthropic
from tests.support.fakes.gemini_upstream import FakeGemini
from tests.support.fakes.server import serve
from tests.support.gateway_process import GatewayProcess


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
    upstream.clear()
    anthropic_upstream.clear()
    gemini_upstream.clear()
    headers = {"x-api-key": database.key}
    with httpx.Client(base_url=vendors_gateway.url, headers=headers, timeout=30, verify=SHARED_TLS) as c:
        yield c
    assert anthropic_upstream.violations == [] and gemini_upstream.violations == []
