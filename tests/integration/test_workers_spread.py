"""`gateway serve --workers 2`: connections opened at once are spread over the workers (each has a
socket of its own on the one port, SO_REUSEPORT), so that kept-alive clients load every worker.
From one shared socket, the worker that woke first accepted a whole burst."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

from tests.support.environments import gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import children_of

CONNECTIONS = 24  # all on one worker by chance: 2 in 2**24


def established_on(port: int) -> set[str]:
    """The inodes of the machine's established TCP sockets whose local port is `port`."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "01":
            found.add(fields[9])
    return found


def sockets_of(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def test_connections_opened_at_once_are_served_by_both_workers(upstream, database):
    with GatewayProcess(gateway_env(upstream.url, database.url, GATEWAY_WORKERS="2")) as gateway, ExitStack() as stack:
        port = int(gateway.url.rsplit(":", 1)[1])
        # Every connection is made (the kernel completes them) before any worker accepts one: a
        # burst, as a pool or a load balancer opens them.
        connections = [stack.enter_context(socket.create_connection(("127.0.0.1", port))) for _ in range(CONNECTIONS)]
        body = json.dumps({"model": "fake/m", "prompt": "x", "max_tokens": 1}).encode()
        request = (f"POST /v5/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: {database.key}\r\n"
                   f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body
        for connection in connections:
            connection.sendall(request)
        for connection in connections:  # answered, and kept open
            connection.settimeout(30)
            assert connection.recv(65536).startswith(b"HTTP/1.1 200 ")
        open_here = established_on(port)
        held = {pid: len(sockets_of(pid) & open_here) for pid in children_of(gateway.proc.pid)}
        serving = [count for count in held.values() if count]
        assert len(serving) == 2 and sum(serving) == CONNECTIONS, held


def test_a_second_gateway_on_the_same_port_is_refused_not_given_half_the_traffic(upstream, database):
    env = gateway_env(upstream.url, database.url, GATEWAY_WORKERS="2")
    with GatewayProcess(env) as first:
        second = subprocess.run([sys.executable, "-m", "gateway", "serve"], capture_output=True, text=True, timeout=120,
                                env={**os.environ, **env, "GATEWAY_HOST": "127.0.0.1", "GATEWAY_PORT": str(first.port)})
        assert second.returncode != 0 and "in use" in second.stderr, second.stderr[-2000:]
