"""Redis for the tests: the machine's shared one (under a key prefix of the test's own) and
servers of a test's own that it may stop, stall and restart."""

from __future__ import annotations

import os
import secrets
import subprocess

from tests.support.processes import wait_until


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
        from tests.support.fakes.server import free_port

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


async def commands_run(url: str, command: str) -> int:
    """How many times a Redis has run `command` (INFO commandstats), asked on a connection of its own."""
    from gateway.store.resp import Redis

    client = Redis(url, connect_timeout=5, timeout=5)
    try:
        info = await client.call("INFO", "commandstats")
        info = info.decode() if isinstance(info, bytes) else info
    finally:
        await client.close()
    line = next((line for line in info.splitlines() if line.startswith(f"cmdstat_{command}:")), "calls=0,")
    return int(line.split("calls=")[1].split(",")[0])
