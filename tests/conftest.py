"""Shared fixtures: a fake OpenAI-compatible vendor on loopback and the real gateway in front of it,
on a SQLite database whose accounts and keys were made with the gateway's CLI (tests/support/provision.py):
`database.key` grants acct-a, `database.multi_key` grants acct-a and acct-b. The vendor tests'
gateway (fake Anthropic, Gemini and OpenAI-compatible vendors) is the plugin tests/support/vendor_fixtures.py.
Helpers are in tests/support/."""

from __future__ import annotations

import httpx
import pytest

from tests.support.environments import (
    LOCAL_CONTEXT,
    LOCAL_PARALLEL,
    LOCAL_THREADS,
    LOCAL_TIMEOUT,
    SHARED_TLS,
    gateway_env,
    local_env,
)
from tests.support.fakes.openai_upstream import FakeOpenAI
from tests.support.fakes.server import serve
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import TestDatabase, empty_database, postgres_unavailable, provision, sqlite_database

pytest_plugins = ["tests.support.vendor_fixtures", "tests.support.browser"]


# What a test needs besides Python, as markers (`-m "not postgres"`, `-m chromium`...): given by the
# fixtures it uses; modules that talk to Redis or PostgreSQL directly mark themselves.
_NEEDS = {"postgres": "postgres", "page": "chromium", "browser": "chromium", "gateway_image": "docker"}


def pytest_collection_modifyitems(items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        needs = {mark for fixture, mark in _NEEDS.items() if fixture in item.fixturenames}
        if "postgresql" in params.values():
            needs.add("postgres")
        for mark in needs:
            item.add_marker(mark)


@pytest.fixture(scope="session")
def gateway_image() -> str:
    """The gateway's image (`make image`; .ci/run builds it once per run) with a docker to run it;
    without them, the tests that use it are skipped, saying why."""
    from tests.support.containers import IMAGE, docker_unavailable

    if reason := docker_unavailable():
        pytest.skip(reason)
    return IMAGE


@pytest.fixture(scope="session")
def upstream():
    yield from serve(FakeOpenAI())


@pytest.fixture(autouse=True)
def _clear_upstream(request):
    if "upstream" in request.fixturenames:
        request.getfixturevalue("upstream").clear()


@pytest.fixture(scope="session")
def database() -> TestDatabase:
    with sqlite_database() as db:
        yield db


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def backend_kind(request) -> str:
    """Each database kind in turn. PostgreSQL is the server named by GATEWAY_TEST_DATABASE_URL
    (.ci/run sets it); without one, these tests are skipped, saying why."""
    if request.param == "postgresql" and (reason := postgres_unavailable()):
        pytest.skip(reason)
    return request.param


@pytest.fixture(scope="module")
def backend(backend_kind) -> TestDatabase:
    """A fresh, provisioned database of each kind for a test module."""
    with empty_database(backend_kind) as url:
        yield provision(url)


@pytest.fixture(scope="session")
def gateway(upstream, database):
    with GatewayProcess(gateway_env(upstream.url, database.url)) as process:
        yield process


@pytest.fixture
def client(gateway, database):
    with httpx.Client(base_url=gateway.url, headers={"x-api-key": database.key}, timeout=30, verify=SHARED_TLS) as c:
        yield c


# -- the real embedded model -------------------------------------------------------------------
@pytest.fixture(scope="session")
def local_gateway(database):
    """The gateway with its default `local` vendor: the real model, loaded once per session."""
    with GatewayProcess(local_env(database.url)) as process:
        yield process


@pytest.fixture
def local(local_gateway, database):
    headers = {"x-api-key": database.key}
    with httpx.Client(base_url=local_gateway.url, headers=headers, timeout=LOCAL_TIMEOUT, verify=SHARED_TLS) as c:
        yield c


@pytest.fixture(scope="session")
def engine():
    """The same model in llama.cpp's own server, in this process: a real third-party
    OpenAI-compatible upstream, and an independent reference for what the model computes."""
    from tests.support.llamacpp import EngineServer

    server = EngineServer(parallel=LOCAL_PARALLEL, context_size=LOCAL_CONTEXT, threads=LOCAL_THREADS)
    yield server
    server.close()
