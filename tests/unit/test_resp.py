"""The limits' own Redis client (gateway/store/resp.py): a command written without waiting hands
its reply to a callback as the reply is read, in the order the commands were written, an error
reply as a value, and a lost connection as RedisUnavailable; a script Redis forgot is loaded again.
Nothing sleeps: the tests await what they are told."""

from __future__ import annotations

import asyncio
import secrets
import ssl

import pytest

from gateway.core.errors import ConfigError
from gateway.store.resp import Redis, RedisError, RedisUnavailable, Script, bulk, pack
from tests.support.redis_servers import redis_url

pytestmark = pytest.mark.redis


def client(url: str | None = None) -> Redis:
    return Redis(url or redis_url(), connect_timeout=1, timeout=1)


def test_replies_to_commands_sent_without_waiting_reach_their_callbacks_in_order():
    async def scenario():
        redis = client()
        heard: list = []
        try:
            assert not redis.send(pack("PING"), heard.append)  # not connected: nothing written
            assert await redis.call("PING") == "PONG"
            last = asyncio.get_running_loop().create_future()
            assert redis.send(pack("ECHO", "one"), heard.append)
            assert redis.send(pack("NO-SUCH-COMMAND"), heard.append)
            assert redis.send(pack("ECHO", "three"), lambda reply: (heard.append(reply), last.set_result(None)))
            await last
            assert heard[0] == "one" and heard[2] == "three"
            assert isinstance(heard[1], RedisError)  # an error reply is handed over, not raised
        finally:
            await redis.close()

    asyncio.run(scenario())


def test_a_connection_lost_before_the_reply_tells_the_callback():
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)  # a command arrived; the server goes away without answering
        writer.close()

    async def scenario():
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        redis = client(f"redis://127.0.0.1:{port}/0")
        try:
            await redis._open()
            told = asyncio.get_running_loop().create_future()
            assert redis.send(pack("PING"), told.set_result)
            assert isinstance(await told, RedisUnavailable)
        finally:
            await redis.close()
            server.close()

    asyncio.run(scenario())


def test_a_script_started_without_waiting_is_loaded_again_when_redis_forgot_it_and_tells_its_end():
    async def scenario():
        redis = client()
        script = Script(redis, f"return ARGV[1] -- {secrets.token_hex(8)}")  # a script no Redis has seen
        command = script.head(2) + bulk(0) + bulk("x")
        try:
            await redis.call("PING")
            for _ in range(2):  # not loaded yet, then loaded
                ended = asyncio.get_running_loop().create_future()
                script.start(command, ended.set_result)
                assert await ended is None
            failing = Script(redis, "return redis.error_reply('no')")
            ended = asyncio.get_running_loop().create_future()
            failing.start(failing.head(1) + bulk(0), ended.set_result)
            assert isinstance(await ended, RedisError)
        finally:
            await redis.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(("query", "message"), [
    ("ssl_cert_reqs=none", "only 'required'"),
    ("ssl_verify=no", "unknown parameter ssl_verify"),
    ("ssl_keyfile=/k.pem", "ssl_keyfile without ssl_certfile"),
    ("ssl_ca_certs=/nonexistent/ca.pem", "redis_url ssl_ca_certs: not a readable PEM file"),
    ("ssl_certfile=/nonexistent/c.crt", "redis_url ssl_certfile / ssl_keyfile: not a certificate"),
])
def test_unusable_tls_parameters_are_config_errors_without_the_password(query, message):
    with pytest.raises(ConfigError, match=message) as caught:
        Redis(f"rediss://:hunter2-password@127.0.0.1:6380/0?{query}", connect_timeout=5, timeout=5)
    assert "hunter2" not in str(caught.value)


def test_tls_parameters_need_rediss_and_rediss_always_verifies():
    with pytest.raises(ConfigError, match="ssl_ca_certs need rediss://"):
        Redis("redis://127.0.0.1:6379/0?ssl_ca_certs=/ca.pem", connect_timeout=5, timeout=5)
    context = Redis("rediss://127.0.0.1:6380/0", connect_timeout=5, timeout=5)._tls
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
