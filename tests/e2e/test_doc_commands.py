"""The docs' commands run as written right after the quickstart.

A reader runs ``rollgym run examples/quickstart.yaml`` and then the commands of the README's
"Look inside a run", of trajectories.md's "Turning it on" and of comparing-runs.md, in
order, in a fresh folder holding the repository's ``examples/``. Each must exit 0 (the
viewer's ``traces serve``, which runs until stopped, is left out).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_support import REPO, Job

pytestmark = pytest.mark.e2e

#: (document, a line of the bash block whose commands are run)
BLOCKS = (
    ("README.md", "rollgym traces check runs/quickstart"),
    ("docs/trajectories.md", "rollgym export runs/tokens --format parquet"),
    ("docs/comparing-runs.md", "rollgym compare runs/baseline runs/tuned"),
    ("docs/comparing-runs.md", "rollgym compare runs/step-200 --over version"),
)


def _block_with(document: str, marker: str) -> list[str]:
    """The ``rollgym`` commands of the fenced bash block of ``document`` holding ``marker``."""
    text = (REPO / document).read_text(encoding="utf-8")
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        if marker in block:
            lines = [line.split("  #")[0].strip() for line in block.splitlines()]
            return [line for line in lines if line.startswith("rollgym ")]
    raise AssertionError(f"{document}: no bash block with {marker!r}")


def _run(folder: Path, command: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "rollgym", *shlex.split(command)[1:]]
    return subprocess.run(
        argv,
        cwd=folder,
        env=Job(folder).env(telemetry=True),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_doc_commands_run_as_written_after_the_quickstart(tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    quickstart = _run(tmp_path, "rollgym run examples/quickstart.yaml")
    assert quickstart.returncode == 0, quickstart.stdout[-1500:] + quickstart.stderr[-1500:]
    ran = 0
    for document, marker in BLOCKS:
        for command in _block_with(document, marker):
            if command.startswith("rollgym traces serve"):
                continue  # runs until stopped
            done = _run(tmp_path, command)
            assert done.returncode == 0, (
                f"{document}: {command}\n{done.stdout[-1500:]}{done.stderr[-1500:]}"
            )
            ran += 1
    assert ran >= 12
    # what the commands promise is there: the kept conversation and the tokens
    shown = _run(tmp_path, "rollgym traces show runs/tokens 3-0 --conversation --tokens")
    assert "tokens: " in shown.stdout and "no trajectory recorded" not in shown.stdout
    assert (tmp_path / "runs" / "tokens" / "trajectories.parquet").exists()
