"""`/v5/responses` behind `gateway serve --workers 2`, on real SQLite and PostgreSQL: a response
is committed before its client has the answer (store/response_writer.py), so a client that
retrieves it and chains onto it at once, each through a fresh connection that may land on the
other worker, finds it: plain and streamed, many times, read on both workers. With the database's
writes blocked, an answer still goes out (after the writer's bound, logged) and the response is
found everywhere once the database is back."""

from __future__ import annotations

import http.client
import json
from collections import Counter
from pathlib import Path

from tests.support.environments import gateway_env
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import children_of, wait_until
from tests.support.provision import writes_blocked

ROUNDS = 24  # every read on the answering worker by chance: 2 in 2**48 (reads and chains)


def _server_socket(port: int, client_port: int) -> str | None:
    """The inode of the gateway's end of the loopback connection from `client_port`."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and int(fields[2].split(":")[1], 16) == client_port:
            return fields[9]
    return None


def _worker_holding(inode: str, workers: list[int]) -> int:
    for pid in workers:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if Path(fd).readlink().name == f"socket:[{inode}]":
                    return pid
            except OSError:  # closed meanwhile
                continue
    raise AssertionError(f"no worker holds socket {inode}")


class Gateway:
    """Requests each on a fresh connection, and which worker served each."""

    def __init__(self, process: GatewayProcess, key: str) -> None:
        self.port, self.key, self._pid = process.port, key, process.proc.pid

    @property
    def workers(self) -> list[int]:
        return children_of(self._pid)  # the workers, and any helper process, as they are now

    def both_serving(self) -> None:
        """Return once each worker has served (the gateway is ready when one is)."""
        wait_until(lambda: len({self.call("GET", "/readyz")[2] for _ in range(16)}) == 2,
                   message="a request served by each worker")

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes, int]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.connect()
            headers = {"x-api-key": self.key, "content-type": "application/json"}
            connection.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            answer = connection.getresponse()
            content = answer.read()  # the whole body: a stream's terminal event included
            inode = _server_socket(self.port, connection.sock.getsockname()[1])  # kept alive: still open
            assert inode is not None
            return answer.status, content, _worker_holding(inode, self.workers)
        finally:
            connection.close()

    def create(self, body: dict) -> tuple[str, int]:
        status, content, worker = self.call("POST", "/v5/responses", body)
        assert status == 200, content[-2000:]
        if body.get("stream"):
            events = [json.loads(line[6:]) for line in content.decode().splitlines() if line.startswith("data: ")]
            ends = [event for event in events if event["type"] in ("response.completed", "response.incomplete")]
            assert len(ends) == 1, content[-2000:]
            return ends[0]["response"]["id"], worker
        return json.loads(content)["id"], worker


def test_a_response_is_found_on_every_worker_the_moment_it_is_answered(upstream, backend):
    with GatewayProcess(gateway_env(upstream.url, backend.url, GATEWAY_WORKERS="2")) as process:
        gateway = Gateway(process, backend.key)
        crossed = Counter()  # (answered by, read by) for reads on the other worker
        for i in range(ROUNDS):
            stream = i % 2 == 1
            answered, by = gateway.create({"model": "fake/m", "input": f"turn {i}", "stream": stream})
            status, content, reader = gateway.call("GET", f"/v5/responses/{answered}")
            assert status == 200 and json.loads(content)["id"] == answered, content
            status, content, listed_by = gateway.call("GET", f"/v5/responses/{answered}/input_items")
            assert status == 200 and json.loads(content)["data"][0]["content"][0]["text"] == f"turn {i}"
            chained, chainer = gateway.create({"model": "fake/m", "input": "and then", "stream": stream,
                                               "previous_response_id": answered})
            crossed.update((by, other) for other in (reader, listed_by, chainer) if other != by)
        # Each worker answered and the other read at once what it had answered.
        assert len({answerer for answerer, _ in crossed}) == 2, crossed


def test_with_writes_blocked_an_answer_still_goes_out_and_is_stored_once_they_resume(upstream, database):
    with GatewayProcess(gateway_env(upstream.url, database.url, GATEWAY_WORKERS="2")) as process:
        gateway = Gateway(process, database.key)
        gateway.both_serving()  # a worker still starting would find its database locked
        with writes_blocked(database.url):  # SQLite: no write commits until the block ends
            answered, by = gateway.create({"model": "fake/m", "input": "while the database is away"})
            wait_until(lambda: f"response {answered} answered before it was stored" in process.log(),
                       message="the writer's log of an answer sent before its commit")
        # Once the writer's retry commits it, every worker finds it.
        for _ in range(8):
            wait_until(lambda: gateway.call("GET", f"/v5/responses/{answered}")[0] == 200,
                       message="the response stored after the block")
