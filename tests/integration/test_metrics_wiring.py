"""/metrics fed by the other features, through a real `gateway serve --workers 2`: what every worker
counted in one scrape, the cost of priced requests, refusals by a key's limits, and a deployment
taken out by passive health."""

from __future__ import annotations

import httpx
import pytest

from tests.support.environments import SHARED_TLS
from tests.support.fakes.openai_upstream import FakeOpenAI
from tests.support.fakes.replicas import Broken
from tests.support.fakes.server import ServerThread
from tests.support.gateway_process import GatewayProcess
from tests.support.metrics import metric, scrape
from tests.support.processes import wait_until
from tests.support.provision import new_key, run_cli, sqlite_database
from tests.support.redis_servers import redis_prefix, redis_url, remove_redis_keys

pytestmark = pytest.mark.redis

WORKERS = 2
# $1,000 and $2,000 per million prompt and completion tokens.
PRICES = '{"fake/priced": {"input": 1000, "output": 2000}}'


@pytest.fixture(scope="module")
def db():
    with sqlite_database() as database:
        yield database


@pytest.fixture(scope="module")
def replicas():
    servers = {name: ServerThread(fake) for name, fake in {"fine": FakeOpenAI(), "broken": Broken()}.items()}
    for server in servers.values():
        server.__enter__()
    try:
        yield {name: server.url for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.__exit__()


@pytest.fixture(scope="module")
def gateway(upstream, db, replicas, tmp_path_factory):
    prefix = redis_prefix()
    config = tmp_path_factory.mktemp("wiring") / "gateway.toml"
    config.write_text("\n".join([
        "[vendors.fake]", 'protocol = "openai"', f'base_url = "{upstream.url}/v1"',
        "[vendors.pool]", 'protocol = "openai"', 'routing = "least_outstanding"', "deployments = [",
        *(f'  {{ base_url = "{url}/v1", name = "{name}" }},' for name, url in replicas.items()), "]", ""]))
    env = {"GATEWAY_CONFIG": str(config), "GATEWAY_DATABASE_URL": db.url, "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
           "GATEWAY_WORKERS": str(WORKERS), "GATEWAY_PRICES": PRICES, "GATEWAY_LIMITS_CACHE_SECONDS": "0.05",
           # several workers count limits only in Redis: the test's own prefix, removed afterwards
           "GATEWAY_REDIS_URL": redis_url(), "GATEWAY_REDIS_PREFIX": prefix}
    try:
        with GatewayProcess(env) as process:
            yield process
    finally:
        remove_redis_keys(prefix)


def complete(gateway, key: str, model: str, **body) -> httpx.Response:
    return httpx.post(f"{gateway.url}/v5/completions", json={"model": model, "prompt": "a b c d", "max_tokens": 10}
                      | body, headers={"x-api-key": key}, timeout=30, verify=SHARED_TLS)


def test_one_scrape_counts_every_workers_requests(gateway, db):
    """Each request lands on whichever worker accepts it; a scrape of any worker sees them all."""
    before = metric(scrape(gateway.url), "gateway_requests_total", vendor="fake", model="fake/m", status="200",
                    stream="false", operation="text_completion")
    for _ in range(20):  # fresh connections: the kernel spreads them over the workers
        assert complete(gateway, db.key, "fake/m").status_code == 200
    wait_until(lambda: metric(scrape(gateway.url), "gateway_requests_total", vendor="fake", model="fake/m",
                              status="200", stream="false", operation="text_completion") == before + 20, message="every worker's counts")


def test_the_cost_of_priced_requests_is_counted(gateway, db):
    before = metric(scrape(gateway.url), "gateway_cost_usd_total", vendor="fake", model="fake/priced")
    for _ in range(3):
        assert complete(gateway, db.key, "fake/priced").status_code == 200
    # 4 prompt tokens at $0.001 and 10 completion tokens at $0.002: $0.024 each
    wait_until(lambda: abs(metric(scrape(gateway.url), "gateway_cost_usd_total", vendor="fake",
                                  model="fake/priced") - before - 3 * 0.024) < 1e-9, message="the cost")


def test_refusals_by_a_limit_are_counted_by_reason(gateway, db):
    key, key_id, _ = new_key(db.url)
    run_cli(db.url, "limits", "set", "--key", key_id, "--rpm", "1", "--models", "fake/*")
    # Each fresh connection lands on either worker (a socket each): ten refusals in a row, and both
    # have read the limits (all ten on one worker: 1 in 512).
    wait_until(lambda: all(complete(gateway, key, "nope/x").status_code == 403 for _ in range(10)),
               message="both workers to read the limits")
    before = scrape(gateway.url)
    assert complete(gateway, key, "fake/m").status_code == 200
    assert complete(gateway, key, "fake/m").status_code == 429
    wait_until(lambda: metric(scrape(gateway.url), "gateway_rate_limited_total", reason="rpm")
               == metric(before, "gateway_rate_limited_total", reason="rpm") + 1, message="the refusal")


def test_a_deployment_taken_out_by_passive_health_shows(gateway, db):
    """The broken replica answers 500 to everything: after it is ejected (3 failures in a row, each
    retried on the fine one, so clients see no error) its gauge is 0 in the worker that ejected it.
    Requests go on until one worker has ejected it: ties between the replicas are broken at random
    and the two workers share the requests, so no fixed number of them is sure to give one worker
    three picks of the broken replica."""
    broken = ("gateway_deployment_healthy", frozenset({"vendor": "pool", "deployment": "broken"}.items()))
    assert broken not in scrape(gateway.url)  # no process has judged it yet

    def marked_out() -> bool:
        assert complete(gateway, db.key, "pool/m").status_code == 200
        return scrape(gateway.url).get(broken) == 0

    wait_until(marked_out, message="the broken deployment marked out")
