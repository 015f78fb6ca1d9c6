"""deploy/kubernetes/ describes the deployment the image and the app make, checked as far as a
machine without a cluster can: the manifests as kustomize renders them (`kubectl kustomize`, when
kubectl is installed; else the files kustomization.yaml lists), every GATEWAY_* variable loaded by
the gateway's own settings, the probes on the app's paths and port, the image `make image` builds,
a grace period longer than the drain, and a read-only root with a writable volume wherever the
gateway writes. Nothing here is applied to a cluster (docs/deployment.md says what was run)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile

import pytest
import yaml

from gateway import __version__
from tests.support.containers import IMAGE_NAME, check_gateway_env, gateway_variables, repository_file

KUBERNETES = repository_file("deploy/kubernetes")


def rendered() -> list[dict]:
    if shutil.which("kubectl"):
        done = subprocess.run(["kubectl", "kustomize", str(KUBERNETES)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    listed = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())["resources"]
    return [doc for name in listed for doc in yaml.safe_load_all((KUBERNETES / name).read_text()) if doc]


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict]:
    """The objects by kind; the ConfigMap of the config file as "ConfigFile"."""
    docs = rendered()
    by_kind = {("ConfigFile" if doc["metadata"]["name"].endswith("-file") else doc["kind"]): doc for doc in docs}
    assert len(by_kind) == len(docs)
    assert set(by_kind) == {"ConfigMap", "ConfigFile", "Deployment", "Service", "PodDisruptionBudget",
                            "HorizontalPodAutoscaler"}
    return by_kind


@pytest.fixture(scope="module")
def pod(manifests) -> dict:
    return manifests["Deployment"]["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def gateway(pod) -> dict:
    (container,) = pod["containers"]
    return container


def secret_example() -> dict[str, str]:
    return yaml.safe_load((KUBERNETES / "secret.example.yaml").read_text())["stringData"]


def dockerfile_env() -> dict[str, str]:
    """The image's ENV (Dockerfile): NAME=value pairs of its ENV lines."""
    text = repository_file("Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.removeprefix("ENV ") for line in text.splitlines() if line.startswith("ENV ")]
    return dict(pair.split("=", 1) for line in lines for pair in line.split())


def test_every_variable_is_a_setting_the_gateway_loads(manifests, gateway):
    env = dict(manifests["ConfigMap"]["data"])
    (source,) = gateway["envFrom"]
    assert source["configMapRef"]["name"] == manifests["ConfigMap"]["metadata"]["name"]
    secrets = secret_example()
    for var in gateway["env"]:
        ref = var["valueFrom"]["secretKeyRef"]
        assert ref["name"] == "completions-gateway" and ref["key"] in secrets, ref
        env[var["name"]] = secrets[ref["key"]]
    assert gateway_variables(env)
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as file:  # the mounted file, where the test can read it
        file.write(manifests["ConfigFile"]["data"]["gateway.toml"])
        file.flush()
        assert env["GATEWAY_CONFIG"] == "/etc/gateway/gateway.toml"
        settings = check_gateway_env(dockerfile_env() | env | {"GATEWAY_CONFIG": file.name})
    assert settings.host == "0.0.0.0" and not settings.bootstrap and "openai" in settings.vendors
    assert settings.database_url.get_secret_value().startswith("postgresql://")
    assert settings.redis_url.get_secret_value() and settings.workers == 1


def test_the_config_file_is_mounted_where_gateway_config_names_it(manifests, gateway, pod):
    mount = next(m for m in gateway["volumeMounts"] if m["name"] == "config")
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == manifests["ConfigFile"]["metadata"]["name"]
    (item,) = volume["configMap"]["items"]
    assert item["key"] in manifests["ConfigFile"]["data"]
    assert f"{mount['mountPath']}/{item['path']}" == manifests["ConfigMap"]["data"]["GATEWAY_CONFIG"]


def test_probes_ask_the_apps_health_paths_on_its_port(manifests, gateway):
    paths = json.loads(repository_file("openapi.json").read_text())["paths"]
    ports = {port["name"]: port["containerPort"] for port in gateway["ports"]}
    assert ports == {"http": int(dockerfile_env()["GATEWAY_PORT"])}
    assert "GATEWAY_PORT" not in manifests["ConfigMap"]["data"]
    probes = {name: gateway[name]["httpGet"] for name in ("readinessProbe", "livenessProbe", "startupProbe")}
    assert probes["readinessProbe"]["path"] == "/readyz" and probes["livenessProbe"]["path"] == "/healthz"
    for probe in probes.values():
        assert probe["path"] in paths and probe["port"] in ports
    assert manifests["Service"]["spec"]["ports"][0]["targetPort"] in ports


def test_the_image_is_the_one_make_image_builds(gateway):
    makefile = repository_file("Makefile").read_text()
    assert re.search(rf"^IMAGE\s*:=\s*{IMAGE_NAME}$", makefile, re.M)
    assert gateway["image"] == f"{IMAGE_NAME}:{__version__}"
    assert gateway["args"] == ["serve"]


def test_the_grace_period_outlasts_the_pause_and_the_drain(manifests, pod, gateway):
    shutdown = float(manifests["ConfigMap"]["data"]["GATEWAY_SHUTDOWN_TIMEOUT"])
    pause = float(gateway["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["terminationGracePeriodSeconds"] > pause + shutdown


def test_it_runs_as_the_images_user_on_a_read_only_root_with_volumes_where_it_writes(pod, gateway):
    dockerfile = repository_file("Dockerfile").read_text()
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.M)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert (str(pod["securityContext"]["runAsUser"]), str(pod["securityContext"]["runAsGroup"])) == user.groups()
    assert gateway["securityContext"]["readOnlyRootFilesystem"] is True
    assert gateway["securityContext"]["allowPrivilegeEscalation"] is False
    home = re.search(r"^WORKDIR (\S+)$", dockerfile, re.M).group(1)
    writable = {m["mountPath"] for m in gateway["volumeMounts"] if not m.get("readOnly")}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert all("emptyDir" in volumes[m["name"]] for m in gateway["volumeMounts"] if not m.get("readOnly"))
    # temporary files and the metrics directory (tempfile: /tmp), and the home (the SQLite default)
    assert {"/tmp", home} <= writable
    assert dockerfile_env()["GATEWAY_DATABASE_URL"].removeprefix("sqlite:///").startswith(home)
    assert gateway["resources"]["requests"] and gateway["resources"]["limits"]["memory"]


def test_two_replicas_a_disruption_budget_and_an_autoscaler_on_the_same_pods(manifests):
    deployment = manifests["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] == 2
    for selector in (deployment["spec"]["selector"]["matchLabels"], manifests["Service"]["spec"]["selector"],
                     manifests["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= labels.items()
    assert manifests["PodDisruptionBudget"]["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    hpa = manifests["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": deployment["metadata"]["name"]}
    assert hpa["minReplicas"] == deployment["spec"]["replicas"] < hpa["maxReplicas"]
