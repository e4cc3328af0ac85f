"""The system Chromium, driven by Playwright: one launch recipe for every browser test.

Never a downloaded browser: Debian's ``/usr/bin/chromium`` with the flags this machine needs
(no sandbox as root, no GPU, no background networking on a closed network).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rollgym.tracestore.store_process import TraceStoreProcess, start_trace_store

CHROMIUM = "/usr/bin/chromium"
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
#: tests/e2e, where the run builders the browser tests share with the e2e tests live.
E2E = Path(__file__).resolve().parents[1] / "e2e"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

#: Marks for every browser test module: the marker, and a clean skip without Chromium.
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no system chromium"),
]


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    """A fresh 1400x1000 page in headless system Chromium, for one test module."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1000})
        finally:
            browser.close()


def e2e_run_builder(module: str, name: str) -> Callable[[Path], Path]:
    """A run builder of tests/e2e (``module.name``, which makes a real run in a folder and
    returns it), imported without leaving tests/e2e on ``sys.path``."""
    sys.path.insert(0, str(E2E))
    try:
        builder: Callable[[Path], Path] = getattr(importlib.import_module(module), name)
    finally:
        sys.path.remove(str(E2E))
    return builder


@pytest.fixture(scope="module")
def store(run: Path) -> Iterator[TraceStoreProcess]:
    """The trace store of the module's ``run`` fixture, serving the viewer over that run."""
    process = start_trace_store(run / "traces.db", run / "logs" / "viewer.log", run_dir=run)
    try:
        yield process
    finally:
        process.stop()
