"""Fixtures of the fault suite: the e2e job helpers, with this folder's fault parts importable.

The helpers are the e2e ones (``tests/e2e/e2e_support.py``), imported, not copied.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

FAULTS = Path(__file__).resolve().parent
E2E = FAULTS.parent / "e2e"
sys.path.insert(0, str(E2E))

from e2e_support import Job, _no_leftover_servers  # noqa: E402


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Job:
    """A job folder whose driver and servers import ``fault_parts`` (and the e2e agents)."""
    current = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAULTS), current])))
    monkeypatch.syspath_prepend(str(FAULTS))
    return Job(tmp_path)


@pytest.fixture
def no_leftover_servers(job: Job) -> Iterator[None]:
    """Fails a test that leaves a server process of its job behind."""
    yield from _no_leftover_servers(job.root)


@pytest.fixture
def small_disk(job: Job, request: pytest.FixtureRequest) -> Iterator[Path]:
    """The run's output directory on a tmpfs of the test module's ``DISK_SIZE`` (``mount -o
    size=``; skipped, saying why, where it cannot be mounted): a disk the run fills."""
    from faults_support import output_on_tmpfs

    with output_on_tmpfs(job, request.module.DISK_SIZE) as out:
        yield out
