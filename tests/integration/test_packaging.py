"""The gateway as a plain (non-editable) install: the wheel holds only our three top-level packages,
carries the contract and the migrations as package data, and serves from any directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.support.environments import SHARED_TLS
from tests.support.fakes.server import free_port
from tests.support.gateway_process import GatewayProcess

ROOT = Path(__file__).resolve().parents[2]


def test_the_packaged_contract_is_openapi_json():
    packaged = ROOT / "generated" / "openapi.json"
    assert json.loads(packaged.read_text()) == json.loads((ROOT / "openapi.json").read_text()), "run `make generate`"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of this checkout, built from a copy of what it is built from (setuptools writes
    build/ and egg-info beside the sources: not in the checkout)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("gateway", "handlers", "generated"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(source)], check=True, capture_output=True)
    (found,) = out.glob("completions_gateway-*.whl")
    return found


def test_the_wheel_holds_gateway_handlers_and_generated_with_their_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"gateway", "handlers", "generated"}
    for data in ("generated/openapi.json", "gateway/store/migrations/script.py.mako",
                 "gateway/store/migrations/env.py", "gateway/store/migrations/versions/0001_accounts_keys_ledger.py",
                 "gateway/store/prices.toml", "gateway/http/ui/index.html", "gateway/http/ui/app.js",
                 "gateway/http/ui/style.css"):
        assert data in names


def test_the_installed_wheel_serves_from_any_directory(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The installed copy comes first on the path, ahead of this checkout (which is not on it at all:
    # the working directory is elsewhere).
    env = {"PYTHONPATH": str(site), "GATEWAY_VENDOR_LOCAL_ENABLED": "0",
           "GATEWAY_DATABASE_URL": f"sqlite:///{elsewhere / 'gateway.db'}"}
    version = subprocess.run([sys.executable, "-m", "gateway", "--version"], env=os.environ | env, cwd=elsewhere,
                             check=True, capture_output=True, text=True)
    contract = json.loads((ROOT / "openapi.json").read_text())["info"]["version"]
    assert version.stdout.startswith("gateway ") and f"(API contract {contract})" in version.stdout
    with GatewayProcess(env, port=free_port(), cwd=elsewhere) as gateway:
        where = subprocess.run([sys.executable, "-c", "import gateway, generated; print(gateway.__file__)"],
                               env=os.environ | env, cwd=elsewhere, check=True, capture_output=True, text=True)
        assert where.stdout.startswith(str(site))
        answer = httpx.post(f"{gateway.url}/v5/completions", json={"model": "x/y", "prompt": "p"}, verify=SHARED_TLS)
        assert answer.status_code == 401 and answer.json()["error"]["type"] == "authentication_error"
        page = httpx.get(f"{gateway.url}/ui/", verify=SHARED_TLS)  # the dashboard's files come from the package too
        assert page.status_code == 200 and 'src="app.js"' in page.text
    assert (elsewhere / "gateway.db").exists()  # migrated from the package's own migrations
