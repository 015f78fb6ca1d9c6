"""A pytest plugin (named in tests/conftest.py): a real headless Chromium for the pages the gateway
serves, driven by Playwright.

The browser is Debian's `chromium` (.ci/run installs it): Playwright's own browser download cannot
reach its CDN from these machines, so Playwright is pointed at the system binary. The flags keep a
headless Chromium from reaching for Google's services on a closed network. A test that cannot find
the browser is skipped, saying why; CI installs it, so there it runs.

`page` is a fresh page in a fresh context per test; `screenshot(page, name)` keeps a picture under
.artifacts/ (ignored by git) for a person to look at.

The browser lives for one test module: Playwright's sync API keeps an event loop running in the
test's thread while it is open, and every later `asyncio.run` in that thread (the provisioning
helpers, the CLI) would fail. A module using `page` asks for its databases and gateways first.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("GATEWAY_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts"
FLAGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# Per module, not per session: Playwright's sync API keeps an event loop running in the thread
# while it is open, and every later module's asyncio.run() in the same worker would then fail.
@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield context.new_page()
    finally:
        context.close()


def screenshot(page, name: str, full_page: bool = True) -> Path:
    """A PNG of `page` (the whole page, or what its window shows) in .artifacts/<name>.png, for a
    person to look at."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
