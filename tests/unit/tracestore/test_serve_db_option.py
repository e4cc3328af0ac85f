"""``traces serve --db PATH``: a receiver makes its store where told, and its first line says
when it did, so a mistyped path to a run's store does not pass for a run with no spans."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path


def _first_line(db: Path) -> str:
    """The store's ready line, then the store stopped as a user would (Ctrl-C)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "rollgym", "traces", "serve", "--db", str(db), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().strip()
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=60)
    return line


def test_a_new_store_is_said_to_be_new_and_a_kept_one_is_not(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    first = _first_line(db)
    assert first.startswith("rollgym trace store: http://127.0.0.1:")
    assert first.endswith(f"db {db}, a new empty store)")
    assert db.is_file()
    again = _first_line(db)
    assert again.endswith(f"db {db})"), again
