"""What one process's metrics write when a flush comes (http/observe/metrics.py `Metrics`): the requests,
durations, times to first token, tokens and cost reported since the last flush, added up per label
set and histogram bucket, in a registry of the test's own (no shared directory)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.http.observe import metrics
from tests.support.metrics import metric

SETTINGS = SimpleNamespace(vendors=["fake"], fallbacks={}, metrics_models_per_vendor=4)

OP = {"operation": "text_completion"}  # the requests of POST /v5/completions


def samples(registry: CollectorRegistry) -> dict[tuple[str, frozenset], float]:
    text = generate_latest(registry).decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def row(model: str = "fake/a", outcome: str = "completed", **counts) -> dict:
    return {"vendor": "fake", "model": model, "outcome": outcome, "prompt_tokens": 0, "completion_tokens": 0,
            "cached_tokens": None, "reasoning_tokens": None, "cost_nanos": None} | counts


def counted(report) -> dict[tuple[str, frozenset], float]:
    """The samples after `report(m)` ran in one event-loop step, then one flush."""
    registry = CollectorRegistry()
    m = metrics.Metrics(SETTINGS, registry)

    async def step() -> None:
        report(m)
        m.flush()  # as the flush scheduled by the first report would, later

    asyncio.run(step())
    return samples(registry)


def test_requests_and_their_durations_are_added_up_per_label_set_and_bucket():
    def report(m):
        for status, stream, seconds in [(200, False, 0.005), (200, False, 0.007), (200, True, 0.02),
                                        (502, False, 700.0)]:
            m.started()
            m.ended("fake", "fake/a", status, stream, seconds, None)

    s = counted(report)
    assert metric(s, "gateway_requests_total", **OP, vendor="fake", model="fake/a", status="200", stream="false") == 2
    assert metric(s, "gateway_requests_total", **OP, vendor="fake", model="fake/a", status="200", stream="true") == 1
    assert metric(s, "gateway_requests_total", **OP, vendor="fake", model="fake/a", status="502", stream="false") == 1

    def bucket(le: str) -> float:
        return metric(s, "gateway_request_duration_seconds_bucket", **OP, vendor="fake", model="fake/a", stream="false",
                      le=le)

    assert bucket("0.005") == 1  # a value on a bound is in that bound's bucket
    assert bucket("0.01") == 2 and bucket("600.0") == 2 and bucket("+Inf") == 3  # 700 s: past the last bound
    assert metric(s, "gateway_request_duration_seconds_sum", **OP, vendor="fake", model="fake/a",
                  stream="false") == pytest.approx(700.012)
    assert metric(s, "gateway_in_flight_requests") == 0


def test_time_to_first_token_is_observed_for_streams_that_sent_text():
    def report(m):
        for _ in range(4):  # one of them still going
            m.started()
        m.ended("fake", "fake/a", 200, True, 0.5, 0.03)
        m.ended("fake", "fake/a", 200, True, 0.5, None)  # no text sent
        m.ended("fake", "fake/a", 200, False, 0.5, 0.01)  # not a stream

    s = counted(report)
    assert metric(s, "gateway_time_to_first_token_seconds_count", vendor="fake", model="fake/a") == 1
    assert metric(s, "gateway_time_to_first_token_seconds_bucket", vendor="fake", model="fake/a", le="0.025") == 0
    assert metric(s, "gateway_time_to_first_token_seconds_bucket", vendor="fake", model="fake/a", le="0.05") == 1
    assert metric(s, "gateway_in_flight_requests") == 1


def test_the_rows_tokens_and_cost_are_added_up_per_kind():
    def report(m):
        m.row(row(prompt_tokens=4, completion_tokens=2, cost_nanos=1_500_000_000))
        m.row(row(prompt_tokens=6, completion_tokens=3, cached_tokens=5, cost_nanos=500_000_000))
        m.row(row(model="fake/b", prompt_tokens=1))
        m.row({"vendor": "fake", "model": "fake/a", "outcome": "completed", "completion_tokens": 7})  # fields missing

    s = counted(report)

    def tokens(kind: str, model: str = "fake/a") -> float:
        return metric(s, "gateway_tokens_total", vendor="fake", model=model, kind=kind)

    assert (tokens("prompt"), tokens("completion"), tokens("cached")) == (10, 12, 5)
    assert tokens("prompt", "fake/b") == 1
    assert metric(s, "gateway_cost_usd_total", vendor="fake", model="fake/a") == pytest.approx(2.0)
    # a series never counted is not shown
    names = {(name, labels) for name, labels in s}
    assert ("gateway_tokens_total", frozenset({"vendor": "fake", "model": "fake/a", "kind": "reasoning"}.items())) \
        not in names
    assert ("gateway_tokens_total", frozenset({"vendor": "fake", "model": "fake/b", "kind": "completion"}.items())) \
        not in names


def test_what_was_written_is_not_written_again():
    registry = CollectorRegistry()
    m = metrics.Metrics(SETTINGS, registry)

    async def steps() -> None:
        m.started()
        m.ended("fake", "fake/a", 200, False, 0.1, None)
        m.row(row(prompt_tokens=4))
        m.flush()
        m.flush()

    asyncio.run(steps())
    s = samples(registry)
    assert metric(s, "gateway_requests_total", **OP, vendor="fake", model="fake/a", status="200", stream="false") == 1
    assert metric(s, "gateway_request_duration_seconds_count", **OP, vendor="fake", model="fake/a", stream="false") == 1
    assert metric(s, "gateway_tokens_total", vendor="fake", model="fake/a", kind="prompt") == 4


def test_a_flush_writes_durations_and_first_tokens_before_the_requests_they_belong_to(monkeypatch):
    """A scrape reads every process's files while the others write theirs: a request must not be
    counted before its duration is (the reader reads histograms last: next test)."""
    written: list[str] = []
    observe = metrics._observe
    monkeypatch.setattr(metrics, "_observe", lambda child, buckets, values: (
        written.append("observed"), observe(child, buckets, values)))
    class Requests:  # gateway_requests_total, noting when it is written
        def labels(self, *labels):
            return SimpleNamespace(inc=lambda amount=1: written.append("counted"))

    m = metrics.Metrics(SETTINGS, CollectorRegistry())
    m.requests = Requests()

    async def step() -> None:
        m.started()
        m.ended("fake", "fake/a", 200, True, 0.5, 0.1)  # a stream: a duration and a first token
        m.flush()

    asyncio.run(step())
    assert written == ["observed", "observed", "counted"]


def test_a_scrape_reads_the_histograms_of_every_process_last(tmp_path, monkeypatch):
    for name in ("histogram_7.db", "counter_7.db", "histogram_8.db", "gauge_livesum_8.db", "counter_8.db"):
        (tmp_path / name).write_bytes(b"")
    read: list[list[str]] = []
    monkeypatch.setattr(metrics._ReadInOrder, "merge",
                        staticmethod(lambda files, accumulate=True: read.append([f.rsplit("/", 1)[1] for f in files])
                                     or []))
    list(metrics._ReadInOrder(CollectorRegistry(), path=str(tmp_path)).collect())
    assert [name.startswith("histogram") for name in read[0]] == [False, False, False, True, True]
