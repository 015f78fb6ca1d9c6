"""The gateway's app driven in this process, without sockets: what `--in-process` benches measure.

`drive` builds the app as `gateway serve` would (settings from the environment, the metrics
directory, logging), runs its lifespan, answers the vendor `fake` through an in-process transport,
and sends `requests` completions one after another, each as an ASGI call. It returns the CPU time
per request; with `counting` (bench: `callgrind`) the caller counts instructions instead, while the
measured requests are served. The ledger writes to its database as in production; counting
instructions, its clock-driven commits are left out (see `drive`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping

import httpx
import orjson

from bench.harness import BODY
from tests.support.fakes.httpx_client import answered_by


async def _answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"id": "cmpl-x", "object": "text_completion", "created": 0, "model": "bench",
                                     "choices": [{"index": 0, "text": " w0 w1", "finish_reason": "length"}],
                                     "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}})


async def drive(env: Mapping[str, str], requests: int, key: str,
                counting: Callable[[bool], None] | None = None) -> float:
    """CPU seconds per request of `requests` completions through the app, in this process.
    `counting(True)` is called as the measured requests begin, `counting(False)` as they end."""
    from gateway import services
    from gateway.http.observe import logs, metrics
    from gateway.store.ledger import Ledger

    if counting:
        # The ledger commits on a clock: under valgrind's slowness nearly every request would be a
        # commit of its own, and a slower variant would get more of them. Counting instructions,
        # the ledger commits once, during the warm-up; the rows of the measured requests wait.
        Ledger.COMMIT_INTERVAL = 3600.0
    env = {"GATEWAY_VENDOR_FAKE_PROTOCOL": "openai",
           "GATEWAY_VENDOR_FAKE_SERVER": "openai", "GATEWAY_VENDOR_FAKE_BASE_URL": "http://vendor.invalid/v1",
           "GATEWAY_VENDOR_LOCAL_ENABLED": "0", **env}
    os.environ.update(env)  # GATEWAY_METRICS_DIR etc. as `gateway serve` would see them
    settings = services.load_settings(env)
    if settings.metrics:
        metrics.prepare_directory(settings)
    app = services.create_app(settings)
    logs.configure(settings.log_level, settings.log_format, services.redactor(settings))
    state: dict = {}
    started, stopping = asyncio.Event(), asyncio.Event()

    async def lifespan_receive():
        if not started.is_set():
            return {"type": "lifespan.startup"}
        await stopping.wait()
        return {"type": "lifespan.shutdown"}

    async def lifespan_send(message):
        if message["type"] == "lifespan.startup.complete":
            started.set()
        elif message["type"] == "lifespan.startup.failed":
            raise RuntimeError(message.get("message"))

    life = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": state},
                                   lifespan_receive, lifespan_send))
    await started.wait()
    state["services"].registry.get("fake").use_clients(answered_by(_answer))
    body = orjson.dumps(BODY)
    headers = [(b"host", b"bench"), (b"content-type", b"application/json"), (b"x-api-key", key.encode()),
               (b"content-length", str(len(body)).encode())]
    never = asyncio.Event()

    async def one() -> None:
        sent = False

        async def receive():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await never.wait()

        async def send(message):
            if message["type"] == "http.response.start" and message["status"] != 200:
                raise RuntimeError(f"status {message['status']}")

        await app({"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                   "scheme": "http", "path": "/v5/completions", "raw_path": b"/v5/completions", "query_string": b"",
                   "root_path": "", "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000),
                   "state": dict(state)}, receive, send)

    for _ in range(200):  # warm up
        await one()
    if counting:
        counting(True)
    began = time.process_time()
    for _ in range(requests):
        await one()
    spent = (time.process_time() - began) / requests
    if counting:
        counting(False)
        return spent  # the caller's loop cancels the rest (a shutdown would wait for the ledger's next commit)
    stopping.set()
    await life
    return spent
