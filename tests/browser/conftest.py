"""The system Chromium, driven by Playwright: one launch recipe for every browser test.

Never a downloaded browser: Debian's ``/usr/bin/chromium`` with the flags this machine needs
(no sandbox as root, no GPU, no background networking on a closed network).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
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
