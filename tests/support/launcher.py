"""A process that has imported the gateway once and forks `python -m gateway serve` (or
`python -m tests.support.clocked_gateway serve`) on request: tests/support/gateway_process.py starts the suite's
gateways from it. A fresh interpreter spends most of a gateway's start importing (Connexion,
SQLAlchemy, pydantic, the generated models, uvicorn, ...); a fork of a process that already holds
them starts at `gateway.cli.main`. Each pytest worker starts its own launcher when it first needs
one (`launch`), and the launcher ends when that worker does (its standard input closes).

The child is what `python -m MODULE serve` would be, in every way a test can see: the module runs
as `__main__` (runpy, as `-m` does, so a supervisor's spawned workers import it again), with the
request's environment, working directory, standard output and error (passed as file descriptors),
default signal dispositions, none of the launcher's descriptors, and the interpreter's exit
(non-daemon threads joined, atexit handlers run, streams flushed, exit status as Python gives it).
The launcher forks only while it is single-threaded and has never run an event loop, so a child
inherits no lock, loop or connection; whatever the gateway reads from its environment it reads
after the fork (its settings are loaded in `main`). A request whose environment differs from the
launcher's in anything but the gateway's own and pytest's variables (say a PYTHONPATH of an
installed wheel), or that runs another module or elsewhere, is not forked:
`launch` answers None and the caller starts a fresh interpreter, as it does for every gateway with
GATEWAY_TEST_LAUNCHER=0 (to compare, or to rule the launcher out).

Protocol (a SOCK_SEQPACKET Unix socket, one connection per child): the request is JSON
{"argv", "env", "cwd"} with the child's stdout and stderr descriptors attached; the launcher
answers "pid N", then "exit CODE" when the child ends (CODE as subprocess gives it: -N for a
signal). Each "signal N" from the caller is sent to the child through its pidfd (never to a reused
pid) and answered "signalled".
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODULES = ("gateway", "tests.support.clocked_gateway")  # what the launcher runs; anything else is exec'd
# Variables read when the gateway loads its settings (after the fork), not while it imports.
RUNTIME_PREFIXES = ("GATEWAY_", "PYTEST_")
MAX_MESSAGE = 1 << 20


# -- the caller's side (a pytest worker) ---------------------------------------------------------
class LaunchedProcess:
    """A forked gateway, as much of subprocess.Popen's interface as the tests use."""

    def __init__(self, connection: socket.socket, pid: int, args: list[str]) -> None:
        self._connection = connection
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        while self.returncode is None and select.select([self._connection], [], [], 0)[0]:
            self._read()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        while self.returncode is None:
            if not select.select([self._connection], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._read()
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.poll() is not None:
            return
        self._connection.send(f"signal {int(number)}".encode())
        while self.returncode is None and self._read() != "signalled":
            pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _read(self) -> str:
        message = self._connection.recv(MAX_MESSAGE).decode()
        if not message:
            raise RuntimeError(f"the gateway launcher went away before gateway pid {self.pid} ended")
        if message.startswith("exit "):
            self.returncode = int(message.split()[1])
            self._connection.close()
        return message


class _Launcher:
    """This process's launcher: started on first use, its standard input held until exit."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="gateway-launcher-")
        self.path = os.path.join(self.folder, "socket")
        self.env = dict(os.environ)
        log = ROOT / "var" / f"launcher-{os.getpid()}.log"
        log.parent.mkdir(exist_ok=True)
        listening, ready = os.pipe()  # the launcher closes `ready` once it listens
        with log.open("w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.launcher", self.path, str(ready)], cwd=ROOT,
                                         env=self.env, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                         pass_fds=[ready])
        os.close(ready)
        with os.fdopen(listening, "rb") as pipe:
            pipe.read()  # end of file: listening, or exited
        if not os.path.exists(self.path):
            raise RuntimeError(f"the gateway launcher exited with {self.proc.wait()}:\n{log.read_text()}")
        atexit.register(self.close)

    def serves(self, argv: list[str], env: dict[str, str], cwd: Path) -> bool:
        def fixed(variables: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in variables.items() if not k.startswith(RUNTIME_PREFIXES)}

        return (len(argv) == 4 and argv[:2] == [sys.executable, "-m"] and argv[2] in MODULES
                and Path(cwd).resolve() == ROOT and fixed(env) == fixed(self.env))

    def launch(self, argv: list[str], env: dict[str, str], cwd: Path, stdout: int, stderr: int) -> LaunchedProcess:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        connection.connect(self.path)
        request = json.dumps({"argv": argv, "env": env, "cwd": str(cwd)}).encode()
        socket.send_fds(connection, [request], [stdout, stderr])
        answer = connection.recv(MAX_MESSAGE).decode()
        if not answer.startswith("pid "):
            raise RuntimeError(f"the gateway launcher answered {answer!r}")
        return LaunchedProcess(connection, int(answer.split()[1]), argv)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # its signal to stop
            self.proc.wait(30)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self.folder)


_launcher: _Launcher | None = None


def launch(argv: list[str], env: dict[str, str], cwd: Path, stdout: int, stderr: int) -> LaunchedProcess | None:
    """`argv` (sys.executable -m MODULE serve) forked from this process's launcher, or None when the
    launcher cannot run it exactly as a fresh interpreter would (the caller then starts one)."""
    global _launcher
    if os.environ.get("GATEWAY_TEST_LAUNCHER") == "0" or not hasattr(os, "pidfd_open"):
        return None  # asked for fresh interpreters; or not Linux
    if _launcher is None:
        _launcher = _Launcher()
    if not _launcher.serves(argv, env, cwd):
        return None
    return _launcher.launch(argv, env, cwd, stdout, stderr)


# -- the launcher --------------------------------------------------------------------------------
def _preload() -> None:
    """What every `gateway serve` imports before it serves, imported once here."""
    import aiosqlite  # noqa: F401
    import alembic.command  # noqa: F401
    import alembic.runtime.migration  # noqa: F401
    import asyncpg  # noqa: F401
    import httptools  # noqa: F401
    import uvicorn.lifespan.on  # noqa: F401
    import uvicorn.protocols.http.httptools_impl  # noqa: F401
    import uvloop  # noqa: F401

    import gateway.cli  # noqa: F401
    import gateway.http.server.server  # noqa: F401
    import gateway.services  # noqa: F401


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


class _Child:
    def __init__(self, connection: socket.socket, pid: int) -> None:
        self.connection = connection
        self.pid = pid
        self.pidfd: int | None = os.pidfd_open(pid)  # None once reaped
        self.caller = True  # the caller still holds its end


def serve(path: str, ready: int) -> None:
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    os.close(ready)
    stdin = sys.stdin.fileno()
    children: list[_Child] = []
    while True:
        callers = {c.connection: c for c in children if c.caller}
        running = {c.pidfd: c for c in children if c.pidfd is not None}
        readable = select.select([stdin, listener, *callers, *running], [], [])[0]
        if stdin in readable and not os.read(stdin, 4096):
            return  # the pytest worker is done (or gone)
        if listener in readable:
            connection, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(connection, MAX_MESSAGE, 2)
            request = json.loads(message)
            ours = [listener.fileno(), stdin, connection.fileno(), *(c.fileno() for c in callers), *running]
            pid = _fork(request, fds, ours)
            for fd in fds:
                os.close(fd)
            children.append(_Child(connection, pid))
            connection.send(f"pid {pid}".encode())
            print(f"forked pid {pid}: {' '.join(request['argv'][2:])}", flush=True)
        for pidfd, child in running.items():
            if pidfd in readable:
                _, status = os.waitpid(child.pid, 0)
                os.close(pidfd)
                child.pidfd = None
                if child.caller:
                    with contextlib.suppress(OSError):
                        child.connection.send(f"exit {os.waitstatus_to_exitcode(status)}".encode())
        for connection, child in callers.items():
            if connection not in readable:
                continue
            try:
                message = connection.recv(MAX_MESSAGE).decode()
            except OSError:
                message = ""
            if message.startswith("signal "):
                if child.pidfd is not None:
                    with contextlib.suppress(ProcessLookupError):
                        signal.pidfd_send_signal(child.pidfd, int(message.split()[1]))
                with contextlib.suppress(OSError):
                    connection.send(b"signalled")
            elif not message:  # the caller hung up
                child.caller = False
        for child in [c for c in children if not c.caller and c.pidfd is None]:
            child.connection.close()
            children.remove(child)


def _fork(request: dict[str, Any], fds: list[int], ours: list[int]) -> int:
    """The child's pid; the child runs the request and exits (its descriptors `fds`: stdout, stderr;
    `ours`: the launcher's, closed in the child)."""
    if _threads() != 1 or threading.active_count() != 1:
        raise RuntimeError("the gateway launcher must fork single-threaded")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    try:
        for fd in ours:
            os.close(fd)
        stdout, stderr = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        for fd in (devnull, stdout, stderr):
            if fd > 2:
                os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
        os._exit(70)  # EX_SOFTWARE
    os._exit(_run_as_main(request["argv"][2], request["argv"][3:]))


def _run_as_main(module: str, args: list[str]) -> int:
    """`python -m module args...` from here on, down to its exit status."""
    sys.argv = ["-m", *args]  # runpy puts the module's file first, as -m does
    interrupted = False
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        interrupted, code = True, 1
        sys.excepthook(*sys.exc_info())
    except BaseException:
        code = 1
        sys.excepthook(*sys.exc_info())
    # The interpreter's own exit: wait for non-daemon threads, run atexit handlers, flush.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if interrupted:  # as Python does: die of the SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
