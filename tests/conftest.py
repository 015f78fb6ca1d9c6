"""Shared fixtures: a fake OpenAI-compatible vendor on loopback and the real gateway in front of it."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes.openai_upstream import FakeOpenAI
from tests.fakes.server import ServerThread
from tests.gateway_process import GatewayProcess

KEY = "sk-test-single"  # grants acct-a
MULTI_KEY = "sk-test-multi"  # grants acct-a and acct-b
UPSTREAM_SECRET = "sk-upstream-secret-never-leak"


@pytest.fixture(scope="session")
def upstream():
    fake = FakeOpenAI()
    with ServerThread(fake) as server:
        fake.url = server.url
        yield fake


@pytest.fixture(autouse=True)
def _clear_upstream_requests(request):
    if "upstream" in request.fixturenames:
        request.getfixturevalue("upstream").requests.clear()


def gateway_env(upstream_url: str, **extra: str) -> dict[str, str]:
    return {
        "GATEWAY_API_KEYS": f"{KEY}=acct-a;{MULTI_KEY}=acct-a,acct-b",
        "GATEWAY_VENDOR_FAKE_PROTOCOL": "openai",
        "GATEWAY_VENDOR_FAKE_BASE_URL": f"{upstream_url}/v1",
        "GATEWAY_VENDOR_FAKE_API_KEY": UPSTREAM_SECRET,
        "GATEWAY_VENDOR_FAKE_FIRST_BYTE": "2",
        "GATEWAY_VENDOR_FAKE_IDLE": "2",
        "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
        "GATEWAY_VALIDATE_RESPONSES": "1",
        **extra,
    }


@pytest.fixture(scope="session")
def gateway(upstream):
    with GatewayProcess(gateway_env(upstream.url)) as process:
        yield process


@pytest.fixture
def client(gateway):
    with httpx.Client(base_url=gateway.url, headers={"x-api-key": KEY}, timeout=30) as c:
        yield c


# -- the real embedded model -------------------------------------------------------------------
LOCAL_MODEL = "local/smollm2-135m"
LOCAL_PARALLEL = 2
LOCAL_CONTEXT = 1024


@pytest.fixture(scope="session")
def local_gateway():
    """The gateway with its default `local` vendor: the real model, loaded once per session."""
    env = {
        "GATEWAY_API_KEYS": f"{KEY}=acct-a",
        "GATEWAY_VENDOR_LOCAL_ENABLED": "1",
        "GATEWAY_VENDOR_LOCAL_PARALLEL": str(LOCAL_PARALLEL),
        "GATEWAY_VENDOR_LOCAL_CONTEXT_SIZE": str(LOCAL_CONTEXT),
        "GATEWAY_VALIDATE_RESPONSES": "1",
    }
    with GatewayProcess(env) as process:
        yield process


@pytest.fixture
def local(local_gateway):
    with httpx.Client(base_url=local_gateway.url, headers={"x-api-key": KEY}, timeout=60) as c:
        yield c


@pytest.fixture(scope="session")
def engine():
    """The same model in llama.cpp's own server, in this process: a real third-party
    OpenAI-compatible upstream, and an independent reference for what the model computes."""
    from tests.llamacpp import EngineServer

    server = EngineServer(parallel=LOCAL_PARALLEL, context_size=LOCAL_CONTEXT)
    yield server
    server.close()
