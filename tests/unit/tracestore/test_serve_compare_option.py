"""``traces serve --compare RUN_B``: a missing folder is one line and exit 2, before listening."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_a_missing_compare_folder_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollgym",
            "traces",
            "serve",
            "--compare",
            str(missing),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip() == f"rollgym traces serve: --compare {missing}: no such run directory"
    )
    assert "Traceback" not in done.stderr and not (tmp_path / "traces.db").exists()
