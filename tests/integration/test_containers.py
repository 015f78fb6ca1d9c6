"""Several hosts, for real: two containers of the gateway's image (`make image`), on different
ports of the host's network, share one PostgreSQL database and one Redis (the machine's, under a
prefix of the test's own) in front of the fake vendor. Across both, a key's RPM limit and budget
pass exactly their worth; every request has exactly one ledger row; a key revoked through one
container is refused by the other once its key cache expires; a `docker stop` mid-stream lets the
stream finish and loses no row. And compose.yaml describes the same deployment."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import threading

import aiohttp
import httpx
import pytest
import yaml

from tests.support.bodies import chunks_of, sse_events
from tests.support.containers import (
    IMAGE_NAME,
    GatewayContainer,
    check_gateway_env,
    docker,
    gateway_variables,
    repository_file,
    wait_healthy,
)
from tests.support.environments import gateway_env
from tests.support.fakes.server import free_port
from tests.support.processes import wait_until
from tests.support.provision import (
    empty_database,
    new_key,
    postgres_unavailable,
    requests_in,
    run_cli,
    wait_for_rows,
)
from tests.support.raw_http import SAFETY
from tests.support.redis_servers import redis_prefix, redis_url, remove_redis_keys

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

KEY_CACHE_SECONDS = 2.0
BODY = {"model": "fake/m", "prompt": "a b c d", "max_tokens": 10}  # the fake uses 4 + 10 tokens: 14
TOKENS = 14


class Deployment:
    """Two containers and what they share; keys made (and limited) before they start, so both
    load the limits with their first look."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.rpm_key, rpm_id, self.rpm_account = new_key(url)
        run_cli(url, "limits", "set", "--key", rpm_id, "--rpm", "10", "--budget-tokens", "100000", "--period", "day")
        self.rpm_key_id = rpm_id
        self.budget_key, budget_id, self.budget_account = new_key(url)
        run_cli(url, "limits", "set", "--key", budget_id, "--rpm", "1000", "--budget-tokens", str(6 * TOKENS),
                "--period", "day")
        self.revoked_key, self.revoked_key_id, _ = new_key(url)
        self.stream_key, _, self.stream_account = new_key(url)
        self.containers: list[GatewayContainer] = []


@pytest.fixture(scope="module")
def deployment(gateway_image, upstream):
    if reason := postgres_unavailable():
        pytest.skip(reason)
    prefix = redis_prefix()
    run = secrets.token_hex(4)
    with empty_database("postgresql") as url:
        deployed = Deployment(url)
        # Loopback only, though the image listens on every address: the host's network is the
        # containers' own here. The held stream waits for the test, not for the vendor timeouts.
        env = gateway_env(upstream.url, url, GATEWAY_HOST="127.0.0.1", GATEWAY_VENDOR_LOCAL_ENABLED="0",
                          GATEWAY_REDIS_URL=redis_url(), GATEWAY_REDIS_PREFIX=prefix,
                          GATEWAY_KEY_CACHE_SECONDS=str(KEY_CACHE_SECONDS), GATEWAY_VENDOR_FAKE_FIRST_BYTE="60",
                          GATEWAY_VENDOR_FAKE_IDLE="60", GATEWAY_SHUTDOWN_TIMEOUT="30")
        try:
            for index in (1, 2):
                container = GatewayContainer(f"gateway-test-{run}-{index}", env, free_port(), image=gateway_image)
                deployed.containers.append(container)
                container.start()
            yield deployed
        finally:
            for container in deployed.containers:
                container.remove()
            remove_redis_keys(prefix)


async def burst(urls: list[str], key: str, count: int) -> list[tuple[int, dict]]:
    """`count` requests at once, spread over `urls` in turn, each on a connection of its own."""
    async def one(i: int) -> tuple[int, dict]:
        async with aiohttp.ClientSession() as session, session.post(
                f"{urls[i % len(urls)]}/v5/completions", headers={"x-api-key": key}, json=BODY) as answer:
            return answer.status, await answer.json()

    return await asyncio.gather(*(one(i) for i in range(count)))


def refuses_connections(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=5)
    except httpx.TransportError:  # refused, or closed without an answer
        return True
    return False


def urls(deployment: Deployment) -> list[str]:
    return [container.url for container in deployment.containers]


def test_both_containers_are_healthy_by_the_images_own_check(deployment):
    for container in deployment.containers:
        wait_healthy(container)


def test_the_rpm_limit_passes_exactly_its_worth_across_both(deployment):
    answers = asyncio.run(burst(urls(deployment), deployment.rpm_key, 30))
    statuses = [status for status, _ in answers]
    assert statuses.count(200) == 10 and statuses.count(429) == 20
    assert {body["error"]["code"] for status, body in answers if status == 429} == {"requests_per_minute"}
    rows = wait_for_rows(deployment.url, deployment.rpm_account, 30)
    assert requests_in(rows, "completed") == 10 and requests_in(rows, "refused") == 20  # (rows alike shared)
    shown = json.loads(run_cli(deployment.url, "limits", "show", "--key", deployment.rpm_key_id, "--format", "json"))
    budget = next(row for row in shown if row["limit"] == "budget_tokens")
    assert budget["used"] == str(10 * TOKENS)  # both containers' requests, each charged once


def test_the_budget_passes_exactly_its_worth_across_both(deployment):
    answers = asyncio.run(burst(urls(deployment), deployment.budget_key, 12))
    statuses = [status for status, _ in answers]
    assert statuses.count(200) == 6 and statuses.count(429) == 6
    # Refused as spent, or as reserved by requests still in flight (whichever each found first).
    assert {body["error"]["code"] for status, body in answers if status == 429} <= {"budget_exceeded",
                                                                                    "budget_in_flight"}
    rows = wait_for_rows(deployment.url, deployment.budget_account, 12)
    assert requests_in(rows, "completed") == 6 and requests_in(rows, "refused") == 6
    assert sum(row["total_tokens"] or 0 for row in rows if row["outcome"] == "completed") == 6 * TOKENS


def test_a_key_revoked_through_one_is_refused_by_the_other(deployment):
    one, other = deployment.containers

    def status(container: GatewayContainer) -> int:
        return httpx.post(f"{container.url}/v5/completions", headers={"x-api-key": deployment.revoked_key},
                          json=BODY, timeout=SAFETY).status_code

    assert status(other) == 200  # now in the other's key cache
    revoked = one.gateway("keys", "revoke", deployment.revoked_key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert f"within {KEY_CACHE_SECONDS:g}s" in revoked.stdout
    assert status(one) == 401  # a lookup of its own after the revocation
    # The other trusts its cached answer for KEY_CACHE_SECONDS; the wait is a safety net, not a bound.
    wait_until(lambda: status(other) == 401, timeout=KEY_CACHE_SECONDS + SAFETY, interval=0.2,
               message="the other container to refuse the revoked key")


def test_docker_stop_mid_stream_finishes_the_stream_and_loses_no_row(deployment, upstream):
    stopped, serving = deployment.containers
    answers: list[httpx.Response] = []

    def stream() -> None:
        body = {"model": "fake/held", "prompt": "x", "max_tokens": 12, "stream": True}
        answers.append(httpx.post(f"{stopped.url}/v5/completions", headers={"x-api-key": deployment.stream_key},
                                  json=body, timeout=SAFETY * 2))

    client = threading.Thread(target=stream)
    stopping = threading.Thread(target=stopped.stop, args=(SAFETY,))
    try:
        client.start()
        wait_until(lambda: upstream.holding == 1, message="the stream held mid-way at the vendor")
        stopping.start()  # docker stop: SIGTERM, and SIGKILL only after SAFETY seconds
        wait_until(lambda: refuses_connections(stopped.url), message="the container to stop accepting")
        assert stopped.running() and answers == []  # draining: the stream is still in flight
    finally:
        upstream.release_held()
        client.join(SAFETY)
        stopping.join(SAFETY * 2)
    assert stopped.exit_code() == 0, stopped.logs()
    (answer,) = answers
    assert answer.status_code == 200 and sse_events(answer.text)[-1]["data"] == "[DONE]"
    assert "".join(c["choices"][0]["text"] for c in chunks_of(answer.text) if c["choices"]) == \
        "".join(f" w{k}" for k in range(12))
    (row,) = wait_for_rows(deployment.url, deployment.stream_account, 1)
    assert row["outcome"] == "completed" and row["completion_tokens"] == 12
    other = httpx.post(f"{serving.url}/v5/completions", headers={"x-api-key": deployment.stream_key}, json=BODY,
                       timeout=SAFETY)
    assert other.status_code == 200  # the other host serves on
    assert len(wait_for_rows(deployment.url, deployment.stream_account, 2)) == 2


def test_the_image_is_the_runtime_only_with_its_migrations_as_a_user_of_its_own(gateway_image):
    tools = ("pip", "setuptools", "pytest", "schemathesis", "datamodel_code_generator", "playwright")
    found = docker("run", "--rm", "--network", "host", "--entrypoint", "/opt/gateway/bin/python", gateway_image, "-c",
                   f"import importlib.util, os; print(os.getuid(), [m for m in {tools!r} if importlib.util.find_spec(m)])")
    assert found.stdout.split(maxsplit=1) == ["10001", "[]\n"]
    traced = docker("run", "--rm", "--network", "host", "--entrypoint", "/opt/gateway/bin/python", gateway_image, "-c",
                    "import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.http")
    assert traced.returncode == 0  # OTEL_* variables turn traces on: the image has what they need
    effective = json.loads(docker("run", "--rm", "--network", "host", gateway_image, "config", "check").stdout)
    assert (effective["host"], effective["port"], effective["bootstrap"]) == ("0.0.0.0", 8000, False)
    # The migrations are inside: `migrate` makes the schema of an empty SQLite in the user's home,
    # with no first-start account (a bare `accounts list` would refuse a database that is not there).
    listed = docker("run", "--rm", "--network", "host", "--entrypoint", "/bin/sh", gateway_image, "-c",
                    "gateway migrate && gateway accounts list --format json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []


# -- compose.yaml ----------------------------------------------------------------------------------

def compose_file() -> dict:
    """compose.yaml as docker compose validates and reads it (variables filled in, anchors merged):
    the compose plugin, else Debian's docker-compose, else the file as YAML (anchors merged by the
    parser; variables left as ${...})."""
    path, variables = str(repository_file("compose.yaml")), {"POSTGRES_PASSWORD": "x", "GATEWAY_METRICS_KEY": "y"}
    if shutil.which("docker") and docker("compose", "version", check=False).returncode == 0:
        return json.loads(docker("compose", "-f", path, "config", "--format", "json", env=variables).stdout)
    if shutil.which("docker-compose"):
        done = subprocess.run(["docker-compose", "-f", path, "config"], capture_output=True, text=True,
                              timeout=SAFETY, env={**os.environ, **variables})
        assert done.returncode == 0, done.stderr
        return yaml.safe_load(done.stdout)
    return yaml.safe_load(repository_file("compose.yaml").read_text())


def test_compose_describes_two_gateways_on_one_database_and_one_redis():
    services = compose_file()["services"]
    gateways = {name: service for name, service in services.items() if name.startswith("gateway")}
    assert sorted(gateways) == ["gateway-1", "gateway-2"]
    assert {"postgres", "redis", "prometheus"} <= set(services)
    assert all(service["network_mode"] == "host" for service in services.values())
    settings = [check_gateway_env({k: str(v) for k, v in service["environment"].items()})
                for service in gateways.values()]
    for service in gateways.values():
        assert service["image"].partition(":")[0] == IMAGE_NAME
        assert gateway_variables(service["environment"])  # it configures them by GATEWAY_* variables
    assert len({s.port for s in settings}) == 2 and len({s.database_url.get_secret_value() for s in settings}) == 1
    assert all(s.redis_url.get_secret_value() and not s.bootstrap for s in settings)
    grace = int(gateways["gateway-1"]["stop_grace_period"].rstrip("s"))
    assert grace > max(s.shutdown_timeout for s in settings)
    scrape = yaml.safe_load(repository_file("deploy/compose/prometheus.yml").read_text())["scrape_configs"][0]
    assert sorted(scrape["static_configs"][0]["targets"]) == [f"127.0.0.1:{s.port}" for s in sorted(
        settings, key=lambda s: s.port)]
    assert scrape["metrics_path"] == "/metrics"
