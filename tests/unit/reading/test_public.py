"""The read side's front door stays small, sorted and importable; the viewer ships its files."""

from __future__ import annotations

import rollgym.reading as reading
from rollgym.reading.viewer_routes import viewer_dir


def test_public_names_sorted_and_present() -> None:
    assert reading.__all__ == sorted(reading.__all__)
    for name in reading.__all__:
        assert getattr(reading, name) is not None


def test_viewer_is_offline() -> None:
    files = {path.name: path.read_text() for path in viewer_dir().iterdir()}
    assert set(files) >= {"index.html", "app.js", "style.css"}
    for text in files.values():  # no CDN, no remote fonts
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in text
