"""``traces serve --run-dir RUN``: a folder that is not there is refused in one line, exit 2,
and nothing is created (a run's folder is the run's to make)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _serve(run_dir: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rollgym",
            "traces",
            "serve",
            "--run-dir",
            str(run_dir),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    ("make", "problem"), [(False, "no such run directory"), (True, "not a directory")]
)
def test_a_run_dir_that_is_not_a_folder_is_one_line_and_not_created(
    tmp_path: Path, make: bool, problem: str
) -> None:
    run_dir = tmp_path / "no-such-run"
    if make:
        run_dir.write_text("a file")
    done = _serve(run_dir, tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"rollgym traces serve: --run-dir {run_dir}: {problem}"
    assert run_dir.exists() == make and not (tmp_path / "traces.db").exists()
