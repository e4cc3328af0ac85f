"""The system Chromium, driven by Playwright: one launch recipe for every browser test.

Never a downloaded browser: Debian's ``/usr/bin/chromium`` with the flags this machine needs
(no sandbox as root, no GPU, no background networking on a closed network).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rollgym.tracestore.store_process import TraceStoreProcess, start_trace_store

CHROMIUM = "/usr/bin/chromium"
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
#: tests/e2e, where the run builders the browser tests share with the e2e tests live.
E2E = Path(__file__).resolve().parents[1] / "e2e"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

#: Whether the browser tests save their pictures for the docs in docs/images/ (never in CI:
#: the tree stays clean).
SHOTS = os.environ.get("ROLLGYM_SCREENSHOTS") == "1"

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


def open_view(page: Any, url: str) -> None:
    """Load the viewer at ``url`` as a new document.

    A ``goto`` that changes only the part after ``#`` keeps the page: the view before stays on
    screen until the viewer's router draws the new one, so a wait for a selector both views
    have (a conversation's verdict, a table) can pass on the old view. The module's page is
    shared by its tests, so every hash route is opened from a blank page."""
    page.goto("about:blank")
    page.goto(url)


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


def doc_shot(page: Any, name: str, selector: str | None = None) -> None:
    """Where :data:`SHOTS`: the whole page, or the first ``selector`` on it, as the docs
    image ``docs/images/<name>``."""
    if not SHOTS:
        return
    IMAGES.mkdir(parents=True, exist_ok=True)
    if selector is None:
        page.screenshot(path=str(IMAGES / name), full_page=True)
    else:
        page.locator(selector).first.screenshot(path=str(IMAGES / name))


def waterfall_of(page: Any, rollout_id: str) -> list[str]:
    """Search the viewer on ``page`` for ``rollout_id``; the span names of its first
    attempt's waterfall, top to bottom."""
    page.fill("#search", rollout_id)
    page.click("#search-form button")
    page.wait_for_selector(".waterfall .span-row")
    shown = page.locator(".waterfall").first.locator(".span-row")
    span_names: list[str] = shown.evaluate_all("rows => rows.map(r => r.dataset.name)")
    return span_names


def span_details(page: Any, span_name: str) -> str:
    """Click the first span named ``span_name`` in the waterfall on ``page``; the text of the
    details (its attributes) the viewer opens."""
    page.locator(f".span-row[data-name='{span_name}']").first.click()
    details: str = page.locator(".details").first.inner_text()
    return details


@contextmanager
def synthetic_viewer(folder: Path, rollouts: int) -> Iterator[tuple[TraceStoreProcess, Any]]:
    """A trace store (and its viewer) in ``folder`` holding a synthetic run of ``rollouts``
    rollouts sent over OTLP (:func:`synthetic_run.emit_run`): the store and the run."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from synthetic_run import emit_run

    store = start_trace_store(folder / "traces.db", folder / "store.log", run_dir=folder)
    try:
        exporter = lambda: OTLPSpanExporter(endpoint=store.traces_endpoint)  # noqa: E731
        yield store, emit_run(exporter, rollouts=rollouts)
    finally:
        store.stop()
