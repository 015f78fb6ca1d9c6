"""GET /metrics: Prometheus counts that add up over every process sharing one metrics directory,
with label values a client cannot multiply, and the ledger's backlog; real gateway processes in
front of the fake vendor, scraped over HTTP."""

from __future__ import annotations

import asyncio
import secrets
from types import SimpleNamespace

import httpx
import pytest
from starlette.datastructures import Headers

from gateway.core.config import Settings
from gateway.core.errors import AuthenticationFailed, NotFound
from gateway.http.observe import metrics
from gateway.http.observe.metrics import OTHER, Labels
from gateway.http.server import security
from handlers import metrics as metrics_handler
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.metrics import metric, scrape
from tests.support.processes import wait_until
from tests.support.provision import sqlite_database, writes_blocked

MODELS_PER_VENDOR = 4
BUFFER_ROWS = 2
METRICS_KEY = "scrape-secret-0123456789"


@pytest.fixture(scope="module")
def db():
    with sqlite_database() as database:
        yield database


@pytest.fixture(scope="module")
def pair(upstream, db, tmp_path_factory):
    """Two gateway processes sharing one metrics directory, as the workers of one gateway do."""
    env = gateway_env(upstream.url, db.url, PROMETHEUS_MULTIPROC_DIR=str(tmp_path_factory.mktemp("metrics")),
                      GATEWAY_METRICS_MODELS_PER_VENDOR=str(MODELS_PER_VENDOR),
                      GATEWAY_LEDGER_BUFFER_ROWS=str(BUFFER_ROWS))
    with GatewayProcess(env) as a, GatewayProcess(env) as b:
        yield a, b


def complete(gateway, key: str, model: str = "fake/counted", **body) -> httpx.Response:
    body = {"model": model, "prompt": f"count me {secrets.token_hex(4)}", "max_tokens": 3} | body
    return httpx.post(f"{gateway.url}/v5/completions", json=body, headers={"x-api-key": key}, timeout=30,
                      verify=SHARED_TLS)


def requests_of(samples, model: str, status: str = "200", stream: str = "false", vendor: str = "fake") -> float:
    return metric(samples, "gateway_requests_total", operation="text_completion", vendor=vendor, model=model,
                  status=status, stream=stream)


def test_a_scrape_of_either_process_counts_both(pair, db):
    a, b = pair
    before = scrape(a.url)
    for gateway in (a, a, a, b, b):
        assert complete(gateway, db.key).status_code == 200
    count = "gateway_request_duration_seconds_count"
    labels = {"vendor": "fake", "model": "fake/counted", "stream": "false", "operation": "text_completion"}
    for gateway in (a, b):
        # a process's own counts are in its answer to a scrape; the other's follow within FLUSH_SECONDS
        def counted(url=gateway.url):
            samples = scrape(url)
            return samples if requests_of(samples, "fake/counted") - requests_of(before, "fake/counted") == 5 else None

        after = wait_until(counted, message="both processes' requests")
        assert metric(after, count, **labels) - metric(before, count, **labels) == 5  # histograms: at once
        assert metric(after, "gateway_in_flight_requests") == 0


def test_tokens_are_the_usage_the_clients_were_told(pair, db):
    a, _ = pair
    before = scrape(a.url)
    usage = complete(a, db.key, max_tokens=5).json()["usage"]
    after = scrape(a.url)
    for kind, told in (("prompt", usage["prompt_tokens"]), ("completion", usage["completion_tokens"])):
        labels = {"vendor": "fake", "model": "fake/counted", "kind": kind}
        name = "gateway_tokens_total"
        assert metric(after, name, **labels) - metric(before, name, **labels) == told


def test_streams_count_their_time_to_first_token(pair, db):
    a, _ = pair
    before = scrape(a.url)
    response = complete(a, db.key, stream=True)
    assert response.status_code == 200 and "[DONE]" in response.text
    # The gateway counts a request once its last byte is sent, which the client may have read first.
    def streams(samples) -> float:
        return requests_of(samples, "fake/counted", stream="true")

    def counted():
        samples = scrape(a.url)
        return samples if streams(samples) > streams(before) else None

    after = wait_until(counted, message="the stream counted")
    assert streams(after) - streams(before) == 1
    name, labels = "gateway_time_to_first_token_seconds_count", {"vendor": "fake", "model": "fake/counted"}
    assert metric(after, name, **labels) - metric(before, name, **labels) == 1


def test_in_flight_counts_a_stream_until_it_ends(pair, db, upstream):
    a, b = pair
    with httpx.Client(timeout=30, verify=SHARED_TLS) as client, client.stream(
            "POST", f"{a.url}/v5/completions", headers={"x-api-key": db.key},
            json={"model": "fake/held", "prompt": "hold it", "max_tokens": 4, "stream": True}) as response:
        assert response.status_code == 200
        wait_until(lambda: metric(scrape(b.url), "gateway_in_flight_requests") == 1, message="one in flight")
        upstream.release_held()
        response.read()
    wait_until(lambda: metric(scrape(b.url), "gateway_in_flight_requests") == 0, message="none in flight")


def test_vendor_retries_and_fallbacks_are_counted(pair, db):
    a, _ = pair
    before = scrape(a.url)
    assert complete(a, db.key, model="retrying/flaky-1").status_code == 200
    answer = complete(a, db.key, model="fake/fail-503")
    assert answer.status_code == 200 and answer.headers["x-gateway-model"] == "fake/backup"
    after = scrape(a.url)

    def delta(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert delta("gateway_vendor_retries_total", vendor="retrying", reason="503") == 1
    # local/smollm2-135m cannot serve (no such vendor here): skipped, not tried
    assert delta("gateway_fallbacks_total", model="fake/fail-503", to="fake/fail-400") == 1
    assert delta("gateway_fallbacks_total", model="fake/fail-503", to="fake/backup") == 1


def test_client_chosen_model_names_cannot_multiply_label_values(pair, db):
    a, b = pair
    invented = [f"fake/invented-{secrets.token_hex(6)}" for _ in range(3 * MODELS_PER_VENDOR)]
    before = scrape(a.url)
    for model in invented:
        assert complete(a, db.key, model=model).status_code == 200  # the fake serves any model name
    assert complete(a, db.key, model="fake/fail-404").status_code == 404  # the vendor does not know it
    assert complete(a, db.key, model=f"nowhere-{secrets.token_hex(6)}/x").status_code == 404  # no such vendor
    after = scrape(a.url)
    models = {dict(labels)["model"] for name, labels in after if name == "gateway_requests_total"
              and dict(labels)["vendor"] == "fake"}
    assert len(models - {OTHER}) <= 2 * MODELS_PER_VENDOR  # per process, and there are two
    admitted = [model for model in invented if model in models]
    assert 0 < len(admitted) <= MODELS_PER_VENDOR
    assert "fake/fail-404" not in models
    vendors = {dict(labels)["vendor"] for name, labels in after if name == "gateway_requests_total"}
    assert not any(vendor.startswith("nowhere") for vendor in vendors)
    # every request still counts, under its model or under "other"; the unknown vendor's under "none"
    invented_count = sum(requests_of(after, m) for m in admitted) + requests_of(after, OTHER)
    invented_before = sum(requests_of(before, m) for m in admitted) + requests_of(before, OTHER)
    assert invented_count - invented_before == len(invented)
    assert requests_of(after, OTHER, status="404") - requests_of(before, OTHER, status="404") == 1
    assert requests_of(after, "none", status="404", vendor="none") - requests_of(
        before, "none", status="404", vendor="none") == 1


def test_the_ledger_backlog_and_its_dropped_rows(pair, db):
    a, b = pair
    # rows of the module's earlier tests still waiting would be dropped with these
    wait_until(lambda: metric(scrape(b.url), "gateway_ledger_pending_rows") == 0, message="an empty backlog")
    before = scrape(a.url)
    with writes_blocked(db.url):
        for _ in range(BUFFER_ROWS + 2):
            assert complete(a, db.key).status_code == 200  # completions do not wait for the database
        wait_until(lambda: metric(scrape(b.url), "gateway_ledger_pending_rows") == BUFFER_ROWS, message="backlog")
        dropped = metric(scrape(a.url), "gateway_ledger_dropped_rows_total")
        assert dropped - metric(before, "gateway_ledger_dropped_rows_total") == 2
    wait_until(lambda: metric(scrape(b.url), "gateway_ledger_pending_rows") == 0, message="the backlog written")


@pytest.fixture(scope="module")
def guarded(upstream, db):
    env = gateway_env(upstream.url, db.url, GATEWAY_METRICS_KEY=METRICS_KEY, GATEWAY_METRICS_API_KEYS="1")
    with GatewayProcess(env) as gateway:
        yield gateway


@pytest.mark.parametrize("headers", [{}, {"x-api-key": "wrong-secret-000000"}, {"authorization": "Bearer nope"},
                                     {"x-api-key": "sk-gw-" + "A" * 43}])
def test_protected_metrics_refuse_a_scrape_without_an_accepted_key(guarded, headers):
    response = httpx.get(f"{guarded.url}/metrics", headers=headers, timeout=10, verify=SHARED_TLS)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "metrics_key_required"
    assert METRICS_KEY not in response.text


def test_protected_metrics_take_the_metrics_key_or_an_api_key(guarded, db):
    for headers in ({"x-api-key": METRICS_KEY}, {"authorization": f"Bearer {METRICS_KEY}"}, {"x-api-key": db.key},
                    {"authorization": f"Bearer {db.key}"}):
        response = httpx.get(f"{guarded.url}/metrics", headers=headers, timeout=10, verify=SHARED_TLS)
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        assert "gateway_ledger_dropped_rows_total" in response.text


def stand_in(settings: Settings, headers: dict[str, str], caller: object = None) -> SimpleNamespace:
    """What the handler reads of a request: its headers, its caller, the settings."""
    return SimpleNamespace(headers=Headers(headers), caller_or_none=caller,
                           services=SimpleNamespace(settings=settings))


def test_a_metrics_key_alone_does_not_let_api_keys_scrape():
    settings = Settings(metrics_key=METRICS_KEY)
    with pytest.raises(AuthenticationFailed):
        asyncio.run(metrics_handler.scrape(stand_in(settings, {"x-api-key": "sk-gw-valid"}, caller=object())))
    assert metrics_handler._allowed(stand_in(settings, {"x-api-key": METRICS_KEY}), settings)
    assert metrics_handler._allowed(stand_in(Settings(), {}), Settings())  # nothing configured: open


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "gateway.internal", ""])
def test_a_gateway_other_hosts_can_reach_needs_a_key_for_its_metrics_by_default(host):
    settings = Settings(host=host)
    assert not metrics_handler._allowed(stand_in(settings, {}), settings)
    assert metrics_handler._allowed(stand_in(settings, {"x-api-key": "sk-gw-valid"}, caller=object()), settings)
    assert security.metrics_access(settings) == "metrics need an API key"
    keyed = Settings(host=host, metrics_key=METRICS_KEY)
    assert metrics_handler._allowed(stand_in(keyed, {"authorization": f"Bearer {METRICS_KEY}"}), keyed)
    assert security.metrics_access(keyed) == "metrics need GATEWAY_METRICS_KEY's secret"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "localhost"])
def test_a_loopback_only_gateway_keeps_its_metrics_open_and_says_so(host):
    settings = Settings(host=host)
    assert metrics_handler._allowed(stand_in(settings, {}), settings)
    assert security.metrics_access(settings) == "metrics open to this host (it listens on loopback only)"


def test_readyz_detail_is_for_operators_only():
    outside, key = Settings(host="0.0.0.0"), {"x-api-key": METRICS_KEY}
    assert not security.is_operator(Headers({}), object(), outside)  # a customer's key on a reachable gateway
    assert security.is_operator(Headers({}), object(), Settings(host="0.0.0.0", metrics_api_keys=True))
    assert security.is_operator(Headers(key), None, Settings(host="0.0.0.0", metrics_key=METRICS_KEY))
    assert not security.is_operator(Headers(key), None, outside)  # no metrics key configured: no secret to match
    assert security.is_operator(Headers({}), object(), Settings())  # loopback only, nothing configured
    assert not security.is_operator(Headers({}), None, Settings())  # but never without a key


def test_metrics_turned_off_are_a_404():
    with pytest.raises(NotFound, match="GATEWAY_METRICS=0"):
        asyncio.run(metrics_handler.scrape(stand_in(Settings(metrics=False), {})))


def test_a_named_metrics_directory_is_wiped_of_an_earlier_runs_counts(tmp_path, monkeypatch):
    # set, then removed: monkeypatch records the variable's state before the test only when it
    # changes it, and prepare_directory exports the directory, which must not outlive this test
    # (gateways this worker starts later would inherit it, with the stand-in files below)
    monkeypatch.setenv(metrics.DIRECTORY_ENV, "")
    monkeypatch.delenv(metrics.DIRECTORY_ENV)
    (tmp_path / "counter_123.db").write_bytes(b"stale")
    (tmp_path / "notes.txt").write_text("not ours")
    assert metrics.prepare_directory(Settings(metrics_dir=str(tmp_path))) == str(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert metrics.os.environ[metrics.DIRECTORY_ENV] == str(tmp_path)
    # a directory its supervisor prepared (PROMETHEUS_MULTIPROC_DIR) is left as it is
    (tmp_path / "counter_456.db").write_bytes(b"theirs")
    assert metrics.prepare_directory(Settings(metrics_dir="/elsewhere")) == str(tmp_path)
    assert (tmp_path / "counter_456.db").exists()


def test_label_values_are_bounded_per_vendor():
    labels = Labels(["fake", "other_vendor"], {"fake/gpt": ["other_vendor/backup"]}, per_vendor=2)
    assert labels.vendor("fake") == "fake" and labels.vendor("unconfigured") == OTHER and labels.vendor(None) == "none"
    assert labels.model("fake", "fake/gpt", answered=False) == "fake/gpt"  # configured: always a label
    assert labels.model("other_vendor", "other_vendor/backup", answered=False) == "other_vendor/backup"
    assert labels.model("fake", "fake/a", answered=False) == OTHER  # never answered: not admitted
    assert labels.model("fake", "fake/a", answered=True) == "fake/a"
    assert labels.model("fake", "fake/a", answered=False) == "fake/a"  # admitted, failures count under it too
    assert labels.model("fake", "fake/b", answered=True) == "fake/b"
    assert labels.model("fake", "fake/c", answered=True) == OTHER  # two admitted: the bound (configured ones aside)
    assert labels.model("other_vendor", "other_vendor/" + "x" * 200, answered=True) == OTHER  # too long
    assert labels.model("unconfigured", "unconfigured/x", answered=True) == OTHER
