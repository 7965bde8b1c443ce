"""Headless Chromium for the dashboard's browser tests (Playwright for Python driving Debian's
``chromium``; Playwright's own browser downloads are never used).

Without Playwright or Chromium the browser tests skip, naming what is missing, unless
``CORRAL_REQUIRE_BROWSER=1`` (``.ci/run`` sets it): then they fail, so CI cannot pass by
skipping them. Screenshots go to ``test-artifacts/dashboard/`` (or ``$CORRAL_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.local_stack import ROOT

CHROMIUM = Path(os.environ.get("CORRAL_CHROMIUM", "/usr/bin/chromium"))
# Headless and quiet: no GPU, no QUIC, no first-run work, nothing fetched from Google.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install -e '.[dev]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set CORRAL_CHROMIUM)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = _missing()
    if missing:
        if os.environ.get("CORRAL_REQUIRE_BROWSER") == "1":
            pytest.fail(f"CORRAL_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def artifacts() -> Path:
    folder = Path(os.environ.get("CORRAL_TEST_ARTIFACTS") or ROOT / "test-artifacts") / "dashboard"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
