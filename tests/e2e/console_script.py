"""The installed ``rollgym`` console script, run as a user runs it, and the docs' code blocks.

The doc smoke tests take a page's files verbatim into a temporary working directory and run
``rollgym run`` then ``rollgym traces check`` there with nothing but rollgym's sources on
PYTHONPATH: one copy of that here, so each test says only what its page promises.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

SCRIPT = Path(sys.executable).parent / "rollgym"
REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def require_script() -> Path:
    """The ``rollgym`` console script; the test skips, saying so, where it is not installed."""
    if not SCRIPT.exists():
        pytest.skip(f"no rollgym console script at {SCRIPT} (rollgym is not installed)")
    return SCRIPT


def doc_block(page: str, starting: str, language: str = "python|yaml|bash") -> str:
    """The one fenced code block of ``docs/<page>`` whose first line is ``starting``."""
    doc = DOCS / page
    blocks = re.findall(rf"```(?:{language})\n(.*?)```", doc.read_text(), re.S)
    found = [b for b in blocks if b.startswith(starting)]
    assert len(found) == 1, f"{doc.name}: {len(found)} blocks start with {starting!r}"
    return found[0]


def script_env(*, telemetry: bool = True) -> dict[str, str]:
    """This environment without ``OTEL_*``, rollgym's sources alone on PYTHONPATH (not
    tests/e2e: a module is found only in the working directory, as for a user)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(REPO / "src")
    if not telemetry:
        env["OTEL_SDK_DISABLED"] = "true"
    return env


def run_script(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> None:
    """``rollgym <args>`` in ``cwd``; fails the test with its output unless it exits 0."""
    proc = subprocess.run(
        [str(require_script()), *args],
        cwd=cwd,
        env=env if env is not None else script_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def page_commands(cwd: Path, block: str, last: str, env: dict[str, str]) -> None:
    """Run a page's shell ``block`` in ``cwd`` as a user pastes it: every line but its
    comments and its ``last`` one (the ``rollgym run`` line, checked to read ``last`` and left
    to the test)."""
    *lines, final = block.strip().splitlines()
    assert final == last, f"the page's block ends {final!r}, not {last!r}"
    for line in lines:
        if not line.startswith("#"):
            subprocess.run(line, shell=True, cwd=cwd, check=True, env=env)  # noqa: S602 (the page's own line)


def run_and_check(cwd: Path, config: str, env: dict[str, str] | None = None) -> list[Any]:
    """``rollgym run <config>`` then ``rollgym traces check out`` in ``cwd``, as the pages
    say; both must exit 0. Returns the run's rollout records."""
    run_script(cwd, "run", config, "--no-table", env=env)
    run_script(cwd, "traces", "check", "out", env=env)
    return rollouts(cwd / "out")


def rollouts(out: Path) -> list[Any]:
    """The records of ``out/rollouts.jsonl``."""
    return [orjson.loads(line) for line in (out / "rollouts.jsonl").read_bytes().splitlines()]
