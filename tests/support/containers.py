"""The gateway's image as the tests run it (`make image` builds it; .ci/run once per run): docker's
command line, every container on the host's network (these machines give containers no bridge and
no private-range address; everything they reach is on loopback), and what a deployment file may
name, checked against the gateway's own settings."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

import httpx

from gateway import __version__
from gateway.core.config import ENV_PREFIX, OTHER_VARIABLES, SERVER_FIELDS, Settings
from gateway.core.errors import ConfigError
from gateway.vendors.registry import load_settings
from tests.support.gateway_process import ROOT
from tests.support.processes import wait_until
from tests.support.raw_http import SAFETY

IMAGE_NAME = "completions-gateway"  # the Makefile's IMAGE
IMAGE = os.environ.get("GATEWAY_TEST_IMAGE", f"{IMAGE_NAME}:{__version__}")


def docker_unavailable() -> str | None:
    """Why the container tests cannot run here, or None when they can."""
    if shutil.which("docker") is None:
        return "no docker command (apt-get install docker.io; .ci/run installs it)"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=SAFETY).returncode != 0:
        return "docker's daemon does not answer (.ci/run starts dockerd --bridge=none --iptables=false)"
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=SAFETY).returncode != 0:
        return f"no image {IMAGE}: run `make image` (.ci/run builds it once per run)"
    return None


def docker(*args: str, env: Mapping[str, str] | None = None, check: bool = True,
           timeout: float = SAFETY * 2) -> subprocess.CompletedProcess:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} exited with {done.returncode}: {done.stderr}")
    return done


class GatewayContainer:
    """`gateway serve` in a container of the image, on the host's network at `port`. The
    environment reaches docker by name only (`-e NAME`): no value, secret or not, is on a command line."""

    def __init__(self, name: str, env: Mapping[str, str], port: int, image: str = IMAGE) -> None:
        # The port as a setting, not `serve --port`: the image's HEALTHCHECK reads GATEWAY_PORT too.
        self.name, self.env, self.port, self.image = name, {**env, "GATEWAY_PORT": str(port)}, port, image

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, ready_timeout: float = 120.0) -> GatewayContainer:
        names = [arg for var in self.env for arg in ("-e", var)]
        docker("run", "-d", "--name", self.name, "--network", "host", *names, self.image, env=self.env)
        with httpx.Client(timeout=2) as http:
            def ready() -> bool:
                if not self.running():
                    raise RuntimeError(f"container {self.name} exited:\n{self.logs()}")
                try:
                    return http.get(f"{self.url}/readyz").status_code == 200
                except httpx.HTTPError:
                    return False

            try:
                wait_until(ready, timeout=ready_timeout, interval=0.1, message=f"{self.name} to be ready")
            except AssertionError as exc:
                raise RuntimeError(f"{exc}:\n{self.logs()}") from None
        return self

    def running(self) -> bool:
        return docker("inspect", "-f", "{{.State.Running}}", self.name).stdout.strip() == "true"

    def exit_code(self) -> int:
        return int(docker("inspect", "-f", "{{.State.ExitCode}}", self.name).stdout.strip())

    def health(self) -> str:
        return docker("inspect", "-f", "{{.State.Health.Status}}", self.name).stdout.strip()

    def gateway(self, *args: str) -> subprocess.CompletedProcess:
        """`gateway ARGS` inside the container, as an operator runs it (`docker exec`)."""
        return docker("exec", self.name, "gateway", *args, check=False)

    def stop(self, grace: float) -> subprocess.CompletedProcess:
        """`docker stop`: SIGTERM, then SIGKILL after `grace` seconds."""
        return docker("stop", "-t", str(int(grace)), self.name, timeout=grace + SAFETY)

    def logs(self) -> str:
        done = docker("logs", self.name, check=False)
        return done.stdout + done.stderr

    def remove(self) -> None:
        docker("rm", "-f", self.name, check=False)


def wait_healthy(container: GatewayContainer) -> None:
    """The image's own HEALTHCHECK says healthy (its interval is the image's, not the test's)."""
    wait_until(lambda: container.health() == "healthy", timeout=SAFETY * 3, interval=0.5,
               message=f"{container.name}'s HEALTHCHECK to pass")


# -- what a deployment file (compose.yaml, deploy/kubernetes/) may name ---------------------------

SETTINGS = frozenset({ENV_PREFIX + name.upper() for name in SERVER_FIELDS} | set(OTHER_VARIABLES))


def gateway_variables(env: Iterable[str]) -> list[str]:
    return sorted(name for name in env if name.startswith(ENV_PREFIX))


def check_gateway_env(env: Mapping[str, str]) -> Settings:
    """The settings a deployment's GATEWAY_* variables give, loaded by the gateway itself: a name
    that is no setting, or a value it refuses, fails here as it would fail the start. Values
    written as ${VAR} (filled in by compose, or by Kubernetes from a Secret) are given a
    placeholder of the right kind first."""
    filled = {name: _placeholder(name, value) for name, value in env.items()}
    try:
        return load_settings(filled)
    except ConfigError as exc:
        raise AssertionError(f"not the gateway's settings: {exc}") from None


_REFERENCE = re.compile(r"\$\{[^}]*\}|\$\(\w+\)|\$\w+")  # ${VAR:-default}, $(VAR) (Kubernetes), $VAR


def _placeholder(name: str, value: str) -> str:
    if not _REFERENCE.search(value):
        return value
    return _REFERENCE.sub("placeholder", value) if name.endswith("_URL") else "placeholder"


def repository_file(path: str) -> Path:
    return ROOT / path
