"""Load balancing end to end: real gateway processes in front of three real replicas of one
OpenAI-compatible vendor (tests/support/fakes/replicas.py): one fine, one slow, one answering 500 to
everything, configured in the TOML form of the README. Clients must never see the broken one;
it gets few requests once ejected, and a latency-aware policy sends the slow one fewer than the
fine one. The same with a replica answering 200 and garbage and one that never answers, and a
client leaving a call that was never answered. Then the ledger's record of the deployment, fan-out, and a vendor whose every
deployment is out (503 with Retry-After, or the model's fallbacks)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import httpx
import pytest

from tests.support.bodies import sse_events
from tests.support.cli import fresh_account
from tests.support.environments import SHARED_TLS, UNREACHABLE_URL
from tests.support.fakes.openai_upstream import FakeOpenAI
from tests.support.fakes.replicas import Broken, Garbage, Hanging, Slow
from tests.support.fakes.server import ServerThread
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import wait_until
from tests.support.provision import create_key, wait_for_rows

ROUTINGS = ("least_outstanding", "weighted_random", "p2c_ewma")
LATENCY_AWARE = ("least_outstanding", "p2c_ewma")
REQUESTS, CONCURRENCY = 300, 8
EJECT_AFTER = 3  # the default


@pytest.fixture(scope="module")
def replicas():
    fakes = {"fine": FakeOpenAI(), "slow": Slow(0.05), "broken": Broken()}
    servers = {name: ServerThread(fake) for name, fake in fakes.items()}
    for server in servers.values():
        server.__enter__()
    try:
        yield {name: (fake, servers[name].url) for name, fake in fakes.items()}
    finally:
        for server in servers.values():
            server.__exit__()


def pool_table(name: str, urls: dict[str, str], routing: str, **extra: str) -> str:
    lines = [f"[vendors.{name}]", 'protocol = "openai"', 'api_key_env = "POOL_KEY"', "deployments = ["]
    for replica, url in urls.items():
        key = ', api_key_env = "BROKEN_KEY"' if replica == "broken" else ""
        lines.append(f'  {{ base_url = "{url}/v1", name = "{replica}"{key} }},')
    lines += ["]", f'routing = "{routing}"', *(f"{k} = {v}" for k, v in extra.items()), ""]
    return "\n".join(lines)


def start_gateway(tmp_path, database_url: str, toml: str) -> GatewayProcess:
    path = tmp_path / "gateway.toml"
    path.write_text(toml)
    return GatewayProcess({"GATEWAY_CONFIG": str(path), "GATEWAY_DATABASE_URL": database_url,
                           "GATEWAY_VENDOR_LOCAL_ENABLED": "0", "GATEWAY_VALIDATE_RESPONSES": "1",
                           "POOL_KEY": "sk-pool-key-never-shown", "BROKEN_KEY": "sk-broken-key-never-shown"})


@pytest.fixture(scope="module")
def pool_gateway(replicas, database, tmp_path_factory):
    urls = {name: url for name, (_, url) in replicas.items()}
    toml = "".join(pool_table(f"pool_{routing}", urls, routing) for routing in ROUTINGS)
    with start_gateway(tmp_path_factory.mktemp("pool"), database.url, toml) as gateway:
        yield gateway


def vendor_state(gateway: GatewayProcess, key: str, vendor: str) -> dict:
    r = httpx.get(f"{gateway.url}/v5/vendors", headers={"x-api-key": key}, verify=SHARED_TLS)
    assert r.status_code == 200, r.text
    return next(v for v in r.json()["data"] if v["name"] == vendor)


async def load(url: str, key: str, model: str, timeout: float = 60) -> list[str]:
    """REQUESTS completions at CONCURRENCY, every third one streamed; the problems clients saw."""
    problems: list[str] = []
    queue = list(range(REQUESTS))

    async def client(http: httpx.AsyncClient) -> None:
        while queue:
            i = queue.pop()
            stream = i % 3 == 0
            body = {"model": model, "prompt": f"request {i}", "max_tokens": 4, "stream": stream}
            r = await http.post("/v5/completions", json=body)
            if r.status_code != 200:
                problems.append(f"{i}: HTTP {r.status_code} {r.text[:200]}")
            elif stream:
                events = sse_events(r.text)
                if events[-1]["data"] != "[DONE]" or any('"error"' in e["data"] for e in events):
                    problems.append(f"{i}: stream {r.text[-300:]}")
            elif r.json()["choices"][0]["text"] != " w0 w1 w2 w3":
                problems.append(f"{i}: {r.text[:200]}")

    async with httpx.AsyncClient(base_url=url, headers={"x-api-key": key}, timeout=timeout, verify=SHARED_TLS) as http:
        await asyncio.gather(*(client(http) for _ in range(CONCURRENCY)))
    return problems


@pytest.mark.parametrize("routing", ROUTINGS)
def test_clients_never_see_the_broken_replica_and_it_gets_few_requests(pool_gateway, replicas, database, routing):
    for fake, _ in replicas.values():
        fake.requests.clear()
    account = fresh_account()
    key = create_key(database.url, account)
    problems = asyncio.run(load(pool_gateway.url, key, f"pool_{routing}/m"))
    assert problems == []
    served = {name: len(fake.requests) for name, (fake, _) in replicas.items()}
    # Ejected after EJECT_AFTER failures in a row; calls already on their way then fail too (at
    # most one per client), and each cooling period that ends in this run lets one trial through.
    assert served["broken"] <= EJECT_AFTER + CONCURRENCY + 5, served
    assert served["fine"] + served["slow"] == REQUESTS, served  # every failed try went elsewhere
    if routing in LATENCY_AWARE:
        assert served["slow"] < served["fine"], served

    state = vendor_state(pool_gateway, key, f"pool_{routing}")
    assert state["routing"] == routing
    deployments = {d["name"]: d for d in state["deployments"]}
    assert deployments["broken"]["state"] in ("ejected", "half_open") and deployments["broken"]["ejections"] >= 1
    assert deployments["broken"]["failures"] >= served["broken"] and deployments["fine"]["failures"] == 0
    assert "latency_ms" in deployments["fine"] and "sk-" not in json.dumps(state) and "127.0.0.1" not in json.dumps(state)
    # Every call released its deployment's slot, streams included.
    wait_until(lambda: all(d["in_flight"] == 0 for d in vendor_state(pool_gateway, key, f"pool_{routing}")["deployments"]),
               message="calls still counted in flight")

    rows = wait_for_rows(database.url, account, REQUESTS)
    assert Counter(row["deployment"] for row in rows) == {"fine": served["fine"], "slow": served["slow"]}


# -- garbage and silence: what a client sees is what health counts ----------------------------------
FIRST_BYTE = 3  # seconds; the gateway's only timeout shorter than the client's
CLIENT_TIMEOUT = 60
SLOW_TIMEOUTS = f"{{ connect = 90, first_byte = {FIRST_BYTE}, idle = 90, total = 600 }}"


@pytest.fixture(scope="module")
def faulty_replicas():
    fakes = {"fine": FakeOpenAI(), "garbage": Garbage(), "hanging": Hanging()}
    with ServerThread(fakes["fine"]) as fine, ServerThread(fakes["garbage"]) as garbage, \
            ServerThread(fakes["hanging"]) as hanging:
        yield fakes, {"fine": fine.url, "garbage": garbage.url, "hanging": hanging.url}


@pytest.fixture(scope="module")
def faulty_gateway(faulty_replicas, database, tmp_path_factory):
    _, urls = faulty_replicas
    toml = "".join(pool_table(f"faulty_{routing}", urls, routing, timeouts=SLOW_TIMEOUTS) for routing in ROUTINGS)
    hanging_only = {"fine": urls["fine"], "hanging": urls["hanging"]}
    toml += "".join(pool_table(f"left_{kind}", hanging_only, "least_outstanding")  # the default first_byte: 60 s
                    for kind in ("plain", "stream"))
    with start_gateway(tmp_path_factory.mktemp("faulty"), database.url, toml) as gateway:
        yield gateway


@pytest.mark.parametrize("routing", ROUTINGS)
def test_garbage_and_silence_cost_clients_nothing(faulty_gateway, faulty_replicas, database, routing):
    """Beside a good replica, one answering 200 and garbage (streamed or not) and one that never
    answers: no client sees an error, both are ejected, and no request waited for the silent one
    past FIRST_BYTE. That last by the timeouts: every other one of the gateway's is longer than
    the client's, so the client's success after its call reached the silent replica means the
    gateway let go of it at FIRST_BYTE, and the silent replica saw each of its calls left."""
    fakes, _ = faulty_replicas
    for fake in fakes.values():
        fake.requests.clear()
    fakes["hanging"].left = 0
    key = create_key(database.url, fresh_account())
    problems = asyncio.run(load(faulty_gateway.url, key, f"faulty_{routing}/m", timeout=CLIENT_TIMEOUT))
    assert problems == []
    served = {name: len(fake.requests) for name, fake in fakes.items()}
    assert served["fine"] == REQUESTS, served
    # Ejected after EJECT_AFTER failures in a row; calls already on their way fail too (at most
    # one per client), and each cooling period that ends in this run lets one trial through.
    assert 0 < served["garbage"] <= EJECT_AFTER + CONCURRENCY + 5, served
    assert 0 < served["hanging"] <= EJECT_AFTER + CONCURRENCY + 5, served
    wait_until(lambda: fakes["hanging"].left == served["hanging"], message="calls the gateway did not let go of")

    deployments = {d["name"]: d for d in vendor_state(faulty_gateway, key, f"faulty_{routing}")["deployments"]}
    for name in ("garbage", "hanging"):
        found = deployments[name]
        assert found["failures"] == served[name], deployments
        # Ejected once it failed EJECT_AFTER times in a row; p2c_ewma may stop choosing it before
        # then, its latency (a hanging call's) being the worst of the two it compares.
        assert found["ejections"] >= 1 or (routing == "p2c_ewma" and found["failures"] < EJECT_AFTER), deployments
    assert deployments["fine"]["failures"] == 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_leaving_an_unanswered_call_counts_against_its_deployment(faulty_gateway, faulty_replicas,
                                                                          database, stream):
    """Clients that give up before the gateway's first_byte (60 s here) still get the silent
    replica ejected: each call it held when its client left is one of its failures."""
    fakes, _ = faulty_replicas
    hanging = fakes["hanging"]
    key = create_key(database.url, fresh_account())
    vendor = f"left_{'stream' if stream else 'plain'}"

    async def leave_once_it_hangs(http: httpx.AsyncClient) -> bool:
        """One request; left as soon as it reached the silent replica (True), else answered."""
        arrived = len(hanging.requests)
        call = asyncio.create_task(http.post("/v5/completions", json={"model": f"{vendor}/m", "prompt": "p",
                                                                     "max_tokens": 2, "stream": stream}))
        while not call.done() and len(hanging.requests) == arrived:
            await asyncio.sleep(0.01)  # polling the fake's record: the event is in another thread
        if call.done():
            assert call.result().status_code == 200, call.result().text
            return False
        call.cancel()  # the client gives up: its connection closes
        await asyncio.gather(call, return_exceptions=True)
        return True

    async def run() -> int:
        left = 0
        async with httpx.AsyncClient(base_url=faulty_gateway.url, headers={"x-api-key": key}, timeout=CLIENT_TIMEOUT,
                                     verify=SHARED_TLS) as http:
            while left < EJECT_AFTER:
                left += await leave_once_it_hangs(http)
        return left

    left = asyncio.run(run())
    state = wait_until(lambda: (d := vendor_state(faulty_gateway, key, vendor)["deployments"][1])["state"] == "ejected"
                       and d, message="the silent replica is still in")
    assert state["name"] == "hanging" and state["failures"] == left and state["in_flight"] == 0


# -- the ledger, fan-out, everything out: on both databases ---------------------------------------
@pytest.fixture(scope="module")
def small_gateway(replicas, backend, tmp_path_factory):
    urls = {name: url for name, (_, url) in replicas.items() if name != "broken"}
    down = {"0": UNREACHABLE_URL.removesuffix("/v1"), "1": UNREACHABLE_URL.removesuffix("/v1")}
    toml = (pool_table("pair", urls, "least_outstanding")
            + pool_table("spread", urls, "weighted_random", lacks='["prompt", "n"]')
            + pool_table("down", down, "least_outstanding", eject_after=1, cooldown=60)
            + '[fallbacks]\n"down/rescued" = ["pair/m"]\n')
    with start_gateway(tmp_path_factory.mktemp("small"), backend.url, toml) as gateway:
        yield gateway


def test_the_ledger_names_the_deployment_that_answered(small_gateway, replicas, backend):
    account = fresh_account()
    key = create_key(backend.url, account)
    prompt = f"who answers {time.monotonic_ns()}"
    for stream in (False, True):
        r = httpx.post(f"{small_gateway.url}/v5/completions", headers={"x-api-key": key}, verify=SHARED_TLS,
                       json={"model": "pair/m", "prompt": prompt, "max_tokens": 2, "stream": stream})
        assert r.status_code == 200, r.text
    rows = wait_for_rows(backend.url, account, 2)
    answered = [name for name in ("fine", "slow")
                for request in replicas[name][0].requests if request["body"]["prompt"] == prompt]
    assert sorted(row["deployment"] for row in rows) == sorted(answered) and len(answered) == 2


def test_fanned_out_calls_are_routed_one_by_one_and_the_row_names_each_deployment(small_gateway, replicas, backend):
    account = fresh_account()
    key = create_key(backend.url, account)
    tag = time.monotonic_ns()
    prompts = [f"spread {tag} {i}" for i in range(12)]
    r = httpx.post(f"{small_gateway.url}/v5/completions", headers={"x-api-key": key}, verify=SHARED_TLS,
                   json={"model": "spread/m", "prompt": prompts, "max_tokens": 2})
    assert r.status_code == 200 and len(r.json()["choices"]) == 12, r.text
    calls = {name: sum(1 for request in replicas[name][0].requests if request["body"]["prompt"] in prompts)
             for name in ("fine", "slow")}
    assert sum(calls.values()) == 12 and all(calls.values()), calls  # weighted_random: both get some of 12
    (row,) = wait_for_rows(backend.url, account, 1)
    assert sorted(row["deployment"].split(",")) == ["fine", "slow"]


def test_when_every_deployment_is_out_the_client_gets_a_503_with_retry_after(small_gateway, backend):
    key = create_key(backend.url, fresh_account())
    post = lambda model: httpx.post(f"{small_gateway.url}/v5/completions", headers={"x-api-key": key},  # noqa: E731
                                    json={"model": model, "prompt": "x", "max_tokens": 1}, verify=SHARED_TLS)
    first = post("down/m")  # both deployments refuse the connection, and each is ejected at once
    assert first.status_code == 502 and first.json()["error"]["code"] == "vendor_unreachable"
    r = post("down/m")
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "deployments_unavailable" and r.json()["error"]["vendor"] == "down"
    assert 55 <= int(r.headers["retry-after"]) <= 60 and r.headers["x-should-retry"] == "true"
    state = vendor_state(small_gateway, key, "down")
    assert [d["state"] for d in state["deployments"]] == ["ejected", "ejected"]
    assert all(0 < d["returns_in"] <= 60 for d in state["deployments"])


def test_when_every_deployment_is_out_the_models_fallbacks_serve(small_gateway, backend):
    key = create_key(backend.url, fresh_account())
    for _ in range(2):  # the first ejects them (if the test before did not), the second finds them out
        r = httpx.post(f"{small_gateway.url}/v5/completions", headers={"x-api-key": key}, verify=SHARED_TLS,
                       json={"model": "down/rescued", "prompt": "x", "max_tokens": 1})
        assert r.status_code == 200, r.text
        assert r.headers["x-gateway-model"] == "pair/m" and r.headers["x-gateway-fallback-from"] == "down/rescued"
