"""Prometheus metrics (`GET /metrics`), correct however many processes serve.

Every process writes its counts to memory-mapped files in one directory shared by all of them
(prometheus-client's multiprocess mode); a scrape, answered by any process, adds up every file.
`prepare_directory` runs once, in the process that starts the others, before they start: it wipes
what an earlier run left there. Each process then calls `start` (through
http/observability.start_process). Without a directory (the app run in-process, as some tests
do) a process counts in its own memory.

Label values stay bounded whatever clients send (`Labels`): a vendor label is a configured vendor;
a model label is a model of the fallback configuration, or one its vendor answered successfully
(at most `metrics_models_per_vendor` of those per vendor and process); any other is "other". A
client inventing model names cannot create series. "none" marks a request that reached no vendor
(refused by the gateway first).
"""

from __future__ import annotations

import asyncio
import atexit
import bisect
import functools
import glob
import operator
import os
import shutil
import tempfile
from collections import Counter as Tally
from collections import defaultdict
from collections.abc import Iterable, Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess, values
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from gateway.core.config import Settings
from gateway.core.endpoint import Endpoint
from gateway.store.prices import NANOS_PER_USD

PROMETHEUS_CLIENT_VERSION = "0.26.0"
# The variable prometheus-client reads; a supervisor that sets it owns the directory (not wiped).
DIRECTORY_ENV = "PROMETHEUS_MULTIPROC_DIR"
# The text format every Prometheus server reads (the 1.0.0 variant needs a recent one).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
NONE = "none"  # the request reached no vendor
OTHER = "other"  # a value past the bound
MAX_LABEL_CHARS = 128  # a longer model name is never a label value
TOKEN_KINDS = ("prompt", "completion", "cached", "reasoning")
# A ledger row's fields that the metrics count: each kind's tokens, then the row's price
# (store/prices.py; none when unpriced).
USAGE_FIELDS = (*(f"{kind}_tokens" for kind in TOKEN_KINDS), "cost_nanos")
_usage = operator.itemgetter(*USAGE_FIELDS)
# Seconds; a completion takes from milliseconds (cached, tiny) to minutes (long streams).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# Seconds a process's latest counts may wait before the shared files have them (see Metrics).
FLUSH_SECONDS = 1.0


def prepare_directory(settings: Settings) -> str:
    """The shared directory for this run's processes, made ready before any of them starts: the
    one in PROMETHEUS_MULTIPROC_DIR as it is (its owner wipes it), else GATEWAY_METRICS_DIR with
    an earlier run's files removed, else a new private one removed at exit. Exported in
    PROMETHEUS_MULTIPROC_DIR, which the processes started after this inherit."""
    if given := os.environ.get(DIRECTORY_ENV):
        return given
    if settings.metrics_dir:
        path = Path(settings.metrics_dir)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):  # only prometheus-client's files: the directory may hold others
            stale.unlink()
    else:
        path = Path(tempfile.mkdtemp(prefix="gateway-metrics-"))
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    os.environ[DIRECTORY_ENV] = str(path)
    return str(path)


class Bounded:
    """The `known` values, and the first `limit` other distinct values admitted; then OTHER."""

    __slots__ = ("_seen", "_room")

    def __init__(self, limit: int, known: Iterable[str] = ()) -> None:
        self._seen = set(known)
        self._room = limit

    def label(self, value: str, admit: bool = True) -> str:
        if value in self._seen:
            return value
        if admit and self._room > 0 and len(value) <= MAX_LABEL_CHARS:
            self._seen.add(value)
            self._room -= 1
            return value
        return OTHER


class Labels:
    """Bounded vendor and model label values (see the module's docstring)."""

    def __init__(self, vendors: Iterable[str], fallbacks: Mapping[str, Iterable[str]], per_vendor: int) -> None:
        configured: dict[str, set[str]] = {vendor: set() for vendor in vendors}
        for model, chain in fallbacks.items():
            for name in (model, *chain):
                if (vendor := name.partition("/")[0]) in configured:
                    configured[vendor].add(name)
        self._models = {vendor: Bounded(per_vendor, known) for vendor, known in configured.items()}

    def vendor(self, vendor: str | None) -> str:
        if vendor is None:
            return NONE
        return vendor if vendor in self._models else OTHER

    def pair(self, vendor: str | None, model: str | None, answered: bool) -> tuple[str, str]:
        """(vendor, model) as labels (see `model`)."""
        if vendor is None or model is None:
            return (self.vendor(vendor), NONE)
        models = self._models.get(vendor)
        return (vendor, models.label(model, answered)) if models is not None else (OTHER, OTHER)

    def model(self, vendor: str | None, model: str | None, answered: bool) -> str:
        """`model` ("vendor/name") as a label; `answered`: its vendor answered it successfully."""
        if vendor is None or model is None:
            return NONE
        models = self._models.get(vendor)
        return OTHER if models is None else models.label(model, answered)


class Metrics:
    """This process's metrics, by the names docs/operations.md#metrics documents.

    What is counted is kept in this process's memory and written to the shared files at most
    FLUSH_SECONDS later (and before this process answers a scrape, and at exit): a write to the
    files costs microseconds under a lock, a request would make a handful of them, and a scrape
    every few seconds does not need them sooner. A histogram is written as one increment of each
    bucket (prometheus-client's private `_buckets` and `_sum` of a histogram's series; checked as
    they are written, `_check_histogram`).

    What every completion reports (its end, its ledger row) is kept as it came, appended to a list
    per label set: the counting of many requests at once is done by C code (bisect, Counter, sum)
    when they are written, not by Python bytecode on every request."""

    def __init__(self, settings: Settings, registry: CollectorRegistry | None) -> None:
        self.labels = Labels(settings.vendors, settings.fallbacks, settings.metrics_models_per_vendor)
        self._reasons = Bounded(32)
        self._deployments = Bounded(256)
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self._counts: dict[Any, float] = {}  # counter -> what it has counted since the last flush
        self._levels: dict[Any, float] = {}  # gauge -> its value, not yet written
        # Since the last flush: (vendor, model) labels, status, stream -> each ended request's seconds;
        # labels -> each stream's time to first token; labels -> each ledger row's USAGE_FIELDS.
        self._ended: defaultdict[tuple[tuple[str, str], int, bool, str], list[float]] = defaultdict(list)
        self._first_tokens: defaultdict[tuple[str, str], list[float]] = defaultdict(list)
        self._usage: defaultdict[tuple[str, str], list[tuple[Any, ...]]] = defaultdict(list)
        self._flush_loop: asyncio.AbstractEventLoop | None = None  # the loop a flush is scheduled on
        self._in_flight = 0
        r = {"registry": registry}
        # `operation`: gen_ai.operation.name, "text_completion" (POST /v5/completions) or "chat".
        self.requests = Counter("gateway_requests", "Completion requests answered, by HTTP status.",
                                ("vendor", "model", "status", "stream", "operation"), **r)
        self.duration = Histogram("gateway_request_duration_seconds",
                                  "Completion requests from arrival to the end of the answer (a stream's last byte).",
                                  ("vendor", "model", "stream", "operation"), buckets=DURATION_BUCKETS, **r)
        self.ttft = Histogram("gateway_time_to_first_token_seconds",
                              "Streams: from arrival to the first text sent to the client.",
                              ("vendor", "model"), buckets=TTFT_BUCKETS, **r)
        self.tokens = Counter("gateway_tokens", "Tokens of the usage ledger's rows (estimates included).",
                              ("vendor", "model", "kind"), **r)
        self.in_flight = Gauge("gateway_in_flight_requests", "Completion requests being served.",
                               multiprocess_mode="livesum", **r)
        self.retries = Counter("gateway_vendor_retries", "Vendor requests sent again after a failure.",
                               ("vendor", "reason"), **r)
        self.fallbacks = Counter("gateway_fallbacks", "Requests that went on to a fallback model.",
                                 ("model", "to"), **r)
        self.ledger_pending = Gauge("gateway_ledger_pending_rows", "Usage rows waiting to be written.",
                                    multiprocess_mode="livesum", **r)
        self.ledger_dropped = Counter("gateway_ledger_dropped_rows", "Usage rows never written (logged instead).",
                                      **r)
        self.rate_limited = Counter("gateway_rate_limited", "Requests refused by the gateway's own limits.",
                                    ("reason",), **r)
        self.cost = Counter("gateway_cost_usd", "What requests cost by the configured prices, in US dollars.",
                            ("vendor", "model"), **r)
        # The response cache (http/cache.py): `result` is hit, miss or bypass (not asked: docs/cache.md).
        self.cache_lookups = Counter("gateway_cache_lookups", "Completion requests the response cache answered, "
                                     "missed or was bypassed for.", ("result",), **r)
        self.cache_stored = Counter("gateway_cache_stored_bytes", "Bytes of answers written to the response cache.",
                                    **r)
        self.cache_held = Gauge("gateway_cache_memory_bytes", "Bytes the memory response cache holds.",
                                multiprocess_mode="livesum", **r)
        # 1 while every process takes the deployment, 0 once one of them leaves it out.
        self.deployment_healthy = Gauge("gateway_deployment_healthy", "Whether a deployment is taken.",
                                        ("vendor", "deployment"), multiprocess_mode="livemin", **r)

    # -- what is counted ------------------------------------------------------------------------
    # On every completion: its labels, one list append, and a flush made due (`_due`, inlined).
    def started(self) -> None:
        """A completion request began."""
        self._in_flight += 1
        loop = self._flush_loop
        if loop is None or loop.is_closed():
            self._due()

    def ended(self, vendor: str | None, model: str | None, status: int, stream: bool, seconds: float,
              ttft: float | None, operation: str = Endpoint.COMPLETIONS.operation) -> None:
        """A completion request ended (its answer sent, or its client gone): no longer in flight, counted."""
        self._in_flight -= 1
        labels = self.labels.pair(vendor, model, status == 200)
        self._ended[(labels, status, stream, operation)].append(seconds)
        if stream and ttft is not None:
            self._first_tokens[labels].append(ttft)
        loop = self._flush_loop
        if loop is None or loop.is_closed():
            self._due()

    def row(self, row: Mapping[str, Any]) -> None:
        labels = self.labels.pair(row.get("vendor"), row.get("model"), row.get("outcome") == "completed")
        try:
            usage = _usage(row)
        except KeyError:  # a row without one of the fields (every row of the ledger has them all)
            usage = tuple([row.get(field) for field in USAGE_FIELDS])
        self._usage[labels].append(usage)
        loop = self._flush_loop
        if loop is None or loop.is_closed():
            self._due()

    def retry(self, vendor: str, reason: str) -> None:
        self._count(self.retries, (self.labels.vendor(vendor), reason))

    def fallback(self, model: str, to: str) -> None:
        self._count(self.fallbacks, (model, to))  # both are models of the fallback configuration: bounded

    def pending(self, rows: int) -> None:
        self._levels[self.ledger_pending] = rows
        self._due()

    def dropped(self, rows: int) -> None:
        self._count(self.ledger_dropped, (), rows)

    def limited(self, reason: str) -> None:
        self._count(self.rate_limited, (self._reasons.label(reason),))

    def cache(self, result: str) -> None:
        self._count(self.cache_lookups, (result,))

    def cache_kept(self, size: int, held: int | None) -> None:
        self._count(self.cache_stored, (), size)
        if held is not None:
            self._levels[self.cache_held] = held

    def deployment(self, vendor: str, deployment: str, healthy: bool) -> None:
        self._levels[self._child(self.deployment_healthy, (self.labels.vendor(vendor), self._deployments.label(deployment)))
                     ] = 1 if healthy else 0
        self._due()

    # -- writing it -----------------------------------------------------------------------------
    def flush(self) -> None:
        """Write what was counted since the last flush to the shared files (or this process's registry)."""
        self._flush_loop = None
        counts, self._counts = self._counts, {}
        levels, self._levels = self._levels, {}
        ended, self._ended = self._ended, defaultdict(list)
        first_tokens, self._first_tokens = self._first_tokens, defaultdict(list)
        usage, self._usage = self._usage, defaultdict(list)
        self.in_flight.set(self._in_flight)
        # Histograms first, counters after, and a scrape reads them the other way round
        # (`_ReadInOrder`): a scrape that counts a request has its duration and first token too.
        for (labels, status, stream, operation), seconds in ended.items():
            _observe(self._child(self.duration, (*labels, "true" if stream else "false", operation)), DURATION_BUCKETS,
                     seconds)
        for labels, seconds in first_tokens.items():
            _observe(self._child(self.ttft, labels), TTFT_BUCKETS, seconds)
        for (labels, status, stream, operation), seconds in ended.items():
            self._child(self.requests, (*labels, str(status), "true" if stream else "false", operation)).inc(
                len(seconds))
        for labels, rows in usage.items():
            *tokens, nanos = [sum(filter(None, column)) for column in zip(*rows, strict=True)]
            for kind, count in zip(TOKEN_KINDS, tokens, strict=True):
                if count:  # a series is made when first counted: one never counted is not shown
                    self._child(self.tokens, (*labels, kind)).inc(count)
            if nanos:
                self._child(self.cost, labels).inc(nanos / NANOS_PER_USD)
        for counter, amount in counts.items():
            counter.inc(amount)
        for gauge, value in levels.items():
            gauge.set(value)

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        """`metric`'s series of `labels`, made once (prometheus-client's `labels()` takes a lock and
        builds its key on every call); label values are bounded, and so is this."""
        if not labels:
            return metric
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _count(self, counter: Any, labels: tuple[str, ...], amount: float = 1.0) -> None:
        child = self._child(counter, labels)
        self._counts[child] = self._counts.get(child, 0.0) + amount
        self._due()

    def _due(self) -> None:
        loop = self._flush_loop
        if loop is not None and not loop.is_closed():
            return  # a flush is scheduled
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop here: nothing would run a later flush
            self.flush()
            return
        self._flush_loop = loop
        loop.call_later(FLUSH_SECONDS, self.flush)


def _observe(child: Any, buckets: tuple[float, ...], values: list[float]) -> None:
    """`values` observed by histogram series `child`: one increment of each bucket they fall in."""
    _check_histogram(child, buckets)
    # bisect_left: a value on a bound falls in that bound's bucket (le), one past the last in +Inf.
    for index, count in Tally(map(functools.partial(bisect.bisect_left, buckets), values)).items():
        child._buckets[index].inc(count)
    child._sum.inc(sum(values))


def _check_histogram(child: Any, buckets: tuple[float, ...]) -> None:
    """Fail loudly when prometheus-client's histogram series no longer hold what `_observe` writes."""
    found = getattr(child, "_buckets", None)
    if found is None or len(found) != len(buckets) + 1 or not hasattr(child, "_sum"):
        raise RuntimeError(f"prometheus-client {version('prometheus-client')}: a histogram series has no _buckets/"
                           f"_sum as gateway/http/observe/metrics.py expects (written for {PROMETHEUS_CLIENT_VERSION})")


_metrics: Metrics | None = None
_registry: CollectorRegistry | None = None  # this process's own, without a shared directory


def start(settings: Settings) -> Metrics:
    """This process's metrics, created on the first call: in the shared directory when one was
    prepared (its files named by this process's id), else in this process's memory."""
    global _metrics, _registry
    if _metrics is None:
        if os.environ.get(DIRECTORY_ENV):
            if not values.ValueClass._multiprocess:  # prometheus-client chose at import, before the directory
                values.ValueClass = values.MultiProcessValue()
            _metrics = Metrics(settings, None)
        else:
            _registry = CollectorRegistry()
            _metrics = Metrics(settings, _registry)
        atexit.register(_metrics.flush)  # what this process counted last
    return _metrics


def render() -> bytes:
    """The text exposition of every process's metrics (file reads: call it off the event loop,
    after `flush()` on it, so that this process's latest counts are in)."""
    if _registry is not None:
        return generate_latest(_registry)
    registry = CollectorRegistry()
    _ReadInOrder(registry)
    return generate_latest(registry)


class _ReadInOrder(multiprocess.MultiProcessCollector):
    """Every process's files, histograms last: a process writes its histograms before its counters
    (`Metrics.flush`), so what a scrape finds counted it finds observed too (glob's order is the
    directory's, any)."""

    def collect(self):  # type: ignore[no-untyped-def]
        files = glob.glob(os.path.join(self._path, "*.db"))
        return self.merge(sorted(files, key=lambda f: os.path.basename(f).startswith("histogram")), accumulate=True)


def cache_looked_up(result: str) -> None:
    """The response cache's answer to a request: hit, miss or bypass."""
    if _metrics is not None:
        _metrics.cache(result)


def cache_stored(size: int, held: int | None) -> None:
    """An answer of `size` bytes was written to the response cache (`held`: the memory cache's bytes now)."""
    if _metrics is not None:
        _metrics.cache_kept(size, held)


def flush() -> None:
    if _metrics is not None:
        _metrics.flush()


def process_exited(pid: int) -> None:
    """A serving process is gone (its supervisor calls this): its gauges no longer count."""
    if os.environ.get(DIRECTORY_ENV):
        multiprocess.mark_process_dead(pid)
