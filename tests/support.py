"""What the test modules share, in one place: the gateway's environment for the fake vendors, the
vendors table of the vendor tests, SSE parsing, the CLI as an operator calls it, and `wait_until`.

Fixtures live in tests/conftest.py and the plugins it names; test modules import helpers from
here (and the fakes, tests/provision.py and tests/gateway_process.py), never from each other."""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from gateway import cli
from gateway.core.config import VendorConfig
from gateway.vendors import registry
from tests.gateway_process import ROOT

T = TypeVar("T")

# The TLS context of every HTTP client in the tests (`verify=SHARED_TLS`). httpx otherwise builds
# one per client, loading a certificate store each time, which costs more CPU than most of the
# tests' requests to loopback servers (all plain HTTP).
SHARED_TLS = ssl.create_default_context()

UPSTREAM_SECRET = "sk-upstream-secret-never-leak"
ANTHROPIC_SECRET = "sk-ant-upstream-secret-never-leak"
GEMINI_SECRET = "AIza-upstream-secret-never-leak"
# The gateway with the real embedded model (tests/conftest.py's local_gateway).
LOCAL_MODEL = "local/smollm2-135m"
NO_EOS = {"0": -100, "2": -100}  # <|endoftext|> and <|im_end|> banned: generations run to max_tokens
LOCAL_PARALLEL = 2
LOCAL_CONTEXT = 1024
# One engine thread per model (GATEWAY_VENDOR_LOCAL_THREADS): the suite's two workers share the
# machine's cores, and llama.cpp's threads spin while they wait for each other, burning the CPU the
# other worker needs whenever they do not each have a core of their own.
LOCAL_THREADS = 1
# Seconds a client of the real model waits before giving up: a safety net for a busy machine (other
# streams queued for the model's slots, other processes), not a bound under test.
LOCAL_TIMEOUT = 300
# A loopback port nothing listens on: a vendor there is unreachable (connection refused).
UNREACHABLE_URL = "http://127.0.0.1:9/v1"


def local_env(database_url: str) -> dict[str, str]:
    """The environment of a gateway whose `local` vendor runs the real model, as the tests run it."""
    return {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_VENDOR_LOCAL_ENABLED": "1",
        "GATEWAY_VENDOR_LOCAL_PARALLEL": str(LOCAL_PARALLEL),
        "GATEWAY_VENDOR_LOCAL_CONTEXT_SIZE": str(LOCAL_CONTEXT),
        "GATEWAY_VENDOR_LOCAL_THREADS": str(LOCAL_THREADS),
        "GATEWAY_VALIDATE_RESPONSES": "1",
    }


def gateway_env(upstream_url: str, database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a gateway in front of the fake OpenAI-compatible vendor at `upstream_url`."""
    return {
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_VENDOR_FAKE_PROTOCOL": "openai",
        "GATEWAY_VENDOR_FAKE_BASE_URL": f"{upstream_url}/v1",
        "GATEWAY_VENDOR_FAKE_API_KEY": UPSTREAM_SECRET,
        "GATEWAY_VENDOR_FAKE_SERVER": "openai",  # the fake implements the whole contract
        "GATEWAY_VENDOR_FAKE_FIRST_BYTE": "2",
        "GATEWAY_VENDOR_FAKE_IDLE": "2",
        "GATEWAY_VENDOR_FAKE_RETRIES": "0",  # tests/test_faults.py covers retries with its own vendor
        # The same fake vendor with the default retry policy, for the fault tests.
        "GATEWAY_VENDOR_RETRYING_PROTOCOL": "openai",
        "GATEWAY_VENDOR_RETRYING_BASE_URL": f"{upstream_url}/v1",
        "GATEWAY_VENDOR_RETRYING_SERVER": "openai",
        "GATEWAY_VENDOR_RETRYING_FIRST_BYTE": "1",
        "GATEWAY_VENDOR_RETRYING_IDLE": "1",
        "GATEWAY_VENDOR_RETRYING_TOTAL": "2",
        # A vendor nobody answers for, with the default retry policy.
        "GATEWAY_VENDOR_DOWN_PROTOCOL": "openai",
        "GATEWAY_VENDOR_DOWN_BASE_URL": UNREACHABLE_URL,
        "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
        # A chain whose first fallback cannot serve (the vendor rejects it). One on a vendor that is not
        # configured is a startup error (tests/test_settings.py).
        "GATEWAY_FALLBACKS": "fake/fail-503=fake/fail-400,fake/backup",
        "GATEWAY_VALIDATE_RESPONSES": "1",
        **extra,
    }


# -- the vendor tests' gateway: name -> (protocol, fake, options) -----------------------------------
VENDORS: dict[str, tuple[str, str, dict[str, str]]] = {
    "anthropic": ("anthropic", "anthropic", {}),
    "claude_user": ("anthropic", "anthropic", {"prompt_as": "user"}),
    "gemini": ("gemini", "gemini", {"max_candidates": "4"}),
    "gemini1": ("gemini", "gemini", {}),
    # An OpenAI-compatible server lacking everything the gateway can emulate.
    "bare": ("openai", "openai", {"server": "openai", "lacks": "prompt,n,echo,stop,best_of,user"}),
    # One that echoes natively but takes a single stop sequence.
    "fewstops": ("openai", "openai", {"server": "openai", "max_stop": "1"}),
}


def vendor_config(name: str) -> VendorConfig:
    protocol, _, options = VENDORS[name]
    return VendorConfig(name=name, protocol=protocol, options=options)


def capabilities_of(name: str):
    adapter, options = registry.options_of(vendor_config(name))
    return adapter.capabilities_of(options)


# -- server-sent events --------------------------------------------------------------------------
def sse_events(text: str) -> list[dict]:
    """Parse an SSE body into [{"event": ..., "data": ...}]."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        event = {"event": None, "data": []}
        for line in block.split("\n"):
            name, _, value = line.partition(": ")
            if name == "data":
                event["data"].append(value)
            elif name == "event":
                event["event"] = value
        event["data"] = "\n".join(event["data"])
        events.append(event)
    return events


def chunks_of(text: str) -> list[dict]:
    """The completion chunks of a stream (every event without an event name)."""
    return [json.loads(e["data"]) for e in sse_events(text) if e["event"] is None]


def streamed(text: str) -> tuple[dict[int, str], dict[int, list[str]], list[dict]]:
    """A stream's text and finish reasons per choice index, and its chunks."""
    chunks = chunks_of(text)
    texts: dict[int, str] = {}
    finishes: dict[int, list[str]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
            if choice["finish_reason"]:
                finishes.setdefault(choice["index"], []).append(choice["finish_reason"])
    return texts, finishes, chunks


# -- accounts and the CLI ------------------------------------------------------------------------
def fresh_account() -> str:
    return f"acct-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def gateway_cli(db_url: str, *args: str) -> CliResult:
    """`gateway ARGS...` on the database at `db_url`, run in this process (the console script's
    own entry point, `gateway.cli.main`); tests/test_cli.py runs the installed script once."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args), env={"GATEWAY_DATABASE_URL": db_url})
        except SystemExit as exc:  # argparse refuses the arguments
            code = exc.code if isinstance(exc.code, int) else 1
    return CliResult(code, out.getvalue(), err.getvalue())


def console_script(db_url: str, *args: str) -> CliResult:
    """The installed `gateway` console script (next to this interpreter), as an operator runs it,
    on this checkout's code."""
    script = os.path.join(os.path.dirname(sys.executable), "gateway")
    env = {**os.environ, "GATEWAY_DATABASE_URL": db_url, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([script, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)
    return CliResult(done.returncode, done.stdout, done.stderr)


def contains(node: Any, value: Any) -> bool:
    """Whether `value` is `node` or sits anywhere inside it (JSON: dicts' values, lists' items)."""
    if node == value:
        return True
    if isinstance(node, dict):
        return any(contains(v, value) for v in node.values())
    if isinstance(node, list):
        return any(contains(v, value) for v in node)
    return False


# -- time ----------------------------------------------------------------------------------------
class ManualClock:
    """A monotonic clock (seconds) that moves only when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FileClock:
    """The limits' clock of gateways started with tests/clocked_gateway.py: a file holding seconds
    since the epoch, which `advance` moves (the gateway's environment names it)."""

    def __init__(self, path: str, now: float | None = None) -> None:
        self.path = path
        # From the real time: the ledger's rows, from which a budget starts, are stamped with it.
        self.set(time.time() if now is None else now)

    def set(self, now: float) -> None:
        self.now = now
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as file:
            file.write(repr(now))
        os.replace(tmp, self.path)  # a reader never sees half a number

    def advance(self, seconds: float) -> None:
        self.set(self.now + seconds)

    @property
    def env(self) -> dict[str, str]:
        return {"GATEWAY_TEST_CLOCK_FILE": self.path}


# -- Redis -------------------------------------------------------------------------------------
def start_of_today() -> float:
    """The start of the current UTC day, as a test's fixed "now" for budgets kept in Redis: their
    counters expire at their period's end (PEXPIREAT, store/counters_redis.py), and Redis expires
    them by its own clock, so a "now" of a day gone by would see them vanish as they are written."""
    return float(int(time.time()) // 86_400 * 86_400)


def redis_url() -> str:
    """The machine's shared Redis (.ci/run starts one where none answers); tests keep to their own
    key prefix (`redis_prefix`) and remove their keys afterwards (`remove_redis_keys`)."""
    return os.environ.get("GATEWAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def redis_prefix() -> str:
    return f"gateway-test-{secrets.token_hex(6)}:"


def remove_redis_keys(prefix: str, url: str | None = None) -> None:
    import redis

    client = redis.Redis.from_url(url or redis_url())
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


class RedisServer:
    """A Redis of the test's own, on a free port, that the test may stop and start again (the
    machine's shared Redis is never stopped). It keeps nothing on disk."""

    def __init__(self) -> None:
        from tests.fakes.server import free_port

        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._answers, message=f"redis-server on port {self.port}")
        return self

    def _answers(self) -> bool:
        import redis

        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- metrics -------------------------------------------------------------------------------------
def scrape(url: str, **headers: str) -> dict[tuple[str, frozenset], float]:
    """A gateway's GET /metrics as {(sample name, its labels as a set of pairs): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    response = httpx.get(f"{url}/metrics", headers=headers, timeout=10, verify=SHARED_TLS)
    assert response.status_code == 200, response.text
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def metric(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    """The value of one sample (0 when it has none yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


# -- waiting for things --------------------------------------------------------------------------
def wait_until(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.02,
               message: str = "") -> T:
    """The first truthy value of `predicate()`, polled every `interval` seconds. `timeout` is a
    safety net for a condition that never comes (then AssertionError), not a bound under test."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout}s: {message or predicate}")
        time.sleep(interval)


def memory(pid: int, field: str = "VmRSS") -> int:
    """A process's resident memory (VmRSS) or its peak (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        kib = next(line for line in status if line.startswith(f"{field}:")).split()[1]
    return int(kib) * 1024


def assert_responsive(gateway) -> None:
    """The gateway answers /healthz at once (a pinned event loop would hold it for seconds; the 1 s
    client timeout is a safety net, not a bound under test)."""
    assert httpx.get(f"{gateway.url}/healthz", timeout=1, verify=SHARED_TLS).status_code == 200


def off_loop(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` in a thread of its own: for code that runs its own event loop
    (asyncio.run) from a test whose thread already has one (Playwright's sync API keeps one)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(function, *args).result()


def children_of(pid: int) -> list[int]:
    """The processes `pid` started (a gateway's supervisor: its workers), from /proc."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def workers_of(pid: int) -> list[int]:
    """A gateway supervisor's workers (its other child is multiprocessing's resource tracker)."""
    workers = []
    for child in children_of(pid):
        try:
            if b"resource_tracker" not in Path(f"/proc/{child}/cmdline").read_bytes():
                workers.append(child)
        except OSError:
            pass  # it has just exited
    return workers


@contextlib.contextmanager
def served_in_process(app: Any, settings: Any):
    """`app` served by uvicorn on loopback (settings.port) in a thread of this process, with the
    gateway's own connection class and its lifespan, as `gateway serve` would; yields its URL."""
    import uvicorn

    from gateway.http import connection

    config = uvicorn.Config(app, host="127.0.0.1", port=settings.port, lifespan="on", loop="asyncio",
                            http=connection.protocol(settings), log_config=None, access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, message="the in-process gateway started")
    try:
        yield f"http://127.0.0.1:{settings.port}"
    finally:
        server.should_exit = True
        thread.join(30)
