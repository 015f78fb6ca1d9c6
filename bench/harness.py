"""What the benchmarks share: the requests they send, a closed-loop load generator and its
samples, the fake vendor they measure against, other checkouts to measure beside this one, and
the processes' CPU time and cores. Benchmarks import the test harness only through tests.support,
and each other's pieces only from here."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from tests.support.gateway_process import ROOT

BODY = {"model": "fake/bench", "prompt": "The quick brown fox", "max_tokens": 16}
STREAM_BODY = {**BODY, "max_tokens": 64, "stream": True}
STREAMS = {  # name: (body, tokens)
    "64 tokens": ({**STREAM_BODY, "stream_options": {"include_usage": True}}, 64),
    "1 token": ({**STREAM_BODY, "max_tokens": 1, "stream_options": {"include_usage": True}}, 1),
    "64 paced": ({**STREAM_BODY, "model": "fake/slow-1", "stream_options": {"include_usage": True}}, 64),
}
# The endpoints side by side (bench.run --endpoints, --callgrind --endpoints).
ENDPOINT_TEXT = "The quick brown fox"
ENDPOINTS = {  # name: (path, plain body, 64-token stream body)
    "chat": ("/v5/chat/completions",
             {"model": "fake/bench", "messages": [{"role": "user", "content": ENDPOINT_TEXT}], "max_tokens": 16},
             {"model": "fake/bench", "messages": [{"role": "user", "content": ENDPOINT_TEXT}], "max_tokens": 64,
              "stream": True, "stream_options": {"include_usage": True}}),
    "responses": ("/v5/responses", {"model": "fake/bench", "input": ENDPOINT_TEXT, "max_output_tokens": 16},
                  {"model": "fake/bench", "input": ENDPOINT_TEXT, "max_output_tokens": 64, "stream": True}),
    # The same fake vendor named as OpenAI's own server: its Responses API, not its chat (`NATIVE`).
    "native": ("/v5/responses", {"model": "native/bench", "input": ENDPOINT_TEXT, "max_output_tokens": 16},
               {"model": "native/bench", "input": ENDPOINT_TEXT, "max_output_tokens": 64, "stream": True}),
}
# The vendor `native` (--endpoints): the fake as OpenAI's own server, which has the Responses API.
NATIVE = {"GATEWAY_VENDOR_NATIVE_PROTOCOL": "openai", "GATEWAY_VENDOR_NATIVE_SERVER": "openai"}

TICK = os.sysconf("SC_CLK_TCK")
RESPONSES_ENDS = (b"event: response.completed\n", b"event: response.incomplete\n")


@dataclass
class Sample:
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0
    errors: int = 0
    first_bytes: list[float] = field(default_factory=list)  # a stream's time to its first event
    cpu: float = 0.0  # seconds of the gateway's CPU during this sample's rounds

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    def pct(self, q: float, of: str = "latencies") -> float:
        data = sorted(getattr(self, of))
        return data[min(len(data) - 1, int(q * len(data)))] * 1000 if data else float("nan")

    @property
    def cpu_per_request(self) -> float:
        """Milliseconds of the gateway's CPU per request answered."""
        return self.cpu / len(self.latencies) * 1000 if self.latencies else float("nan")


async def one_request(session: aiohttp.ClientSession, url: str, body: dict, headers: dict, sample: Sample) -> None:
    """One request, its latency (and a stream's time to its first event) recorded in `sample`."""
    start = time.perf_counter()
    first = None
    try:
        async with session.post(url, json=body, headers=headers) as response:
            if body.get("stream"):  # read as it comes: when did the first event arrive?
                tail, ended = b"", False
                async for piece in response.content.iter_any():
                    if first is None and b"data: {" in tail + piece:
                        first = time.perf_counter() - start
                    # A Responses stream has no [DONE]: its end is its terminal event (not failed).
                    ended = ended or any(end in tail + piece for end in RESPONSES_ENDS)
                    tail = (tail + piece)[-32:]
                ok = response.status == 200 and (tail.endswith(b"[DONE]\n\n") or ended)
            else:
                await response.read()
                ok = response.status == 200
    except aiohttp.ClientError:
        ok = False
    if ok:
        sample.latencies.append(time.perf_counter() - start)
        if first is not None:
            sample.first_bytes.append(first)
    else:
        sample.errors += 1


async def closed_loop(session: aiohttp.ClientSession, url: str, body: dict, headers: dict, concurrency: int,
                      seconds: float, sample: Sample) -> None:
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < stop_at:
            await one_request(session, url, body, headers, sample)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    sample.seconds += time.perf_counter() - began


def start_vendor(port: int) -> subprocess.Popen:
    code = ("import uvicorn; from tests.support.fakes.openai_upstream import FakeOpenAI; "
            f"uvicorn.run(FakeOpenAI(), host='127.0.0.1', port={port}, log_level='warning', "
            "loop='uvloop', http='httptools', access_log=False)")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    deadline = time.monotonic() + 10
    import socket

    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.05)
    raise RuntimeError("vendor did not start")


def revision(checkout: Path) -> str:
    """Another checkout's commit (short), for the tables."""
    found = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() or checkout.name


def checkout_python(checkout: Path) -> str:
    """The interpreter of another checkout: its own virtual environment (its dependencies may differ
    from this one's), else this one's."""
    venv = checkout.resolve() / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def cpu_seconds(pid: int | None, workers: bool = False) -> float:
    """User + system CPU time of process `pid` so far (0 for None: the vendor called directly), its
    workers' too when asked."""
    if pid is None:
        return 0.0
    total = 0.0
    for p in [pid, *_children(pid)] if workers else [pid]:
        with open(f"/proc/{p}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15 of stat)
    return total


def cores_apart() -> tuple[set[int], set[int]]:
    """(a core for the gateway, the others for the load generator and the vendor), of this
    process's CPUs (all of them twice on a machine of one)."""
    everything = os.sched_getaffinity(0)
    return {max(everything)}, everything - {max(everything)} or everything


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of a process (and of its workers) onto `cpus`."""
    for p in [pid, *_children(pid)]:
        for task in os.listdir(f"/proc/{p}/task"):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(task), cpus)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as file:
            return [int(c) for c in file.read().split()]
    except OSError:
        return []


def callgrind(on: bool) -> None:
    """Count instructions from now on (or stop): this process runs under valgrind's callgrind."""
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], capture_output=True,
                   check=True)


def counted(on: bool) -> None:
    """Instructions counted from now on (or no longer), the heap left by the warm-up frozen first:
    a full collection of it falling in one run and not in another moved a variant's count by
    several per cent (what a request allocates is still collected, and counted)."""
    if on:
        gc.collect()
        gc.freeze()
    callgrind(on)


VALGRIND = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null"]


def collected(stderr: str) -> int:
    """The instructions valgrind counted, from its summary ("Collected : <instructions>")."""
    return int([line for line in stderr.splitlines() if "Collected :" in line][-1].split()[-1])
