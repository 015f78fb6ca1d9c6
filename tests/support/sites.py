"""Gateways on one database as an operator runs them, for the limits' and rotation's tests: on
SQLite one gateway (counters in its memory), on PostgreSQL two sharing it and the machine's Redis
(under a prefix of the test's own); an admin key's client of the first; the limits' and keys'
clock a file the test moves (tests/support/clocked_gateway.py). And requests sent at once, each on
a connection opened beforehand, so that they reach the gateways together."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import aiohttp
import httpx

from tests.support.clocks import FileClock
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.provision import empty_database, provision, run_cli
from tests.support.redis_servers import redis_prefix, redis_url, remove_redis_keys


@dataclass
class Site:
    kind: str  # "sqlite" or "postgresql"
    urls: list[str]  # the gateways
    database_url: str
    admin: httpx.Client  # an admin key's client of the first gateway
    clock: FileClock
    env: dict[str, str]  # the gateways' environment

    def new_account(self) -> str:
        account = f"team-{secrets.token_hex(4)}"
        assert self.admin.post("/v5/admin/accounts", json={"id": account, "name": "t"}).status_code == 201
        return account

    def new_key(self, limits: dict | None = None, account: str | None = None) -> tuple[str, str]:
        """A key made over HTTP with `limits`, in its own transaction: (key, key id)."""
        body = {"accounts": [account or self.new_account()], "name": "fresh", "scopes": ["inference"]}
        made = self.admin.post("/v5/admin/keys", json=body | ({"limits": limits} if limits else {}))
        assert made.status_code == 201, made.text
        return made.json()["key"], made.json()["api_key"]["id"]


@contextlib.contextmanager
def site(kind: str, upstream_url: str, clock: FileClock, **extra: str) -> Iterator[Site]:
    prefix = redis_prefix()
    with empty_database(kind) as url:
        provision(url)
        run_cli(url, "accounts", "create", "ops")
        admin_key = json.loads(run_cli(url, "keys", "create", "--account", "ops", "--scope", "admin",
                                       "--format", "json"))["key"]
        shared = {"GATEWAY_REDIS_URL": redis_url(), "GATEWAY_REDIS_PREFIX": prefix, "GATEWAY_CACHE": "redis"} \
            if kind == "postgresql" else {"GATEWAY_CACHE": "memory"}
        env = gateway_env(upstream_url, url, GATEWAY_VALIDATE_RESPONSES="0", **clock.env, **shared) | extra
        gateways = [GatewayProcess(env, module="tests.support.clocked_gateway")
                    for _ in range(2 if kind == "postgresql" else 1)]
        try:
            for gateway in gateways:
                gateway.start()
            with httpx.Client(base_url=gateways[0].url, headers={"x-api-key": admin_key}, timeout=30,
                              verify=SHARED_TLS) as admin:
                yield Site(kind, [g.url for g in gateways], url, admin, clock, env)
        finally:
            for gateway in gateways:
                gateway.stop()
            remove_redis_keys(prefix)


Answer = tuple[int, dict[str, str], str]  # status, headers, body


async def at_once(urls: list[str], count: int, method: str, path: str, headers: dict[str, str],
                  body: dict | None = None, until: int | None = None,
                  then: Callable[[], None] | None = None) -> list[Answer]:
    """`count` requests on connections opened beforehand (each its own, spread over `urls` in turn),
    sent together once every connection is open. With `until`, `then()` is called once that many
    have been answered (e.g. to release a stream the vendor holds)."""
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) for _ in range(count)]
    try:
        for opened in await asyncio.gather(*(s.get(f"{urls[i % len(urls)]}/healthz")
                                             for i, s in enumerate(sessions))):
            opened.release()
        go = asyncio.Event()

        async def one(i: int) -> Answer:
            await go.wait()
            async with sessions[i].request(method, f"{urls[i % len(urls)]}{path}", headers=headers,
                                           json=body) as r:
                return r.status, dict(r.headers), await r.text()

        tasks = [asyncio.ensure_future(one(i)) for i in range(count)]
        go.set()
        if until is not None and then is not None:
            pending = set(tasks)
            while count - len(pending) < until and pending:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            then()
        return await asyncio.gather(*tasks)
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
