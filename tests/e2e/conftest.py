"""Shared end-to-end fixtures (helpers in ``e2e_support.py``); nothing here is autouse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import HERE, Job, _no_leftover_servers, pythonpath


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Job:
    """A job folder; the driver and its servers can import the test agents (``agents:<Class>``)."""
    monkeypatch.setenv("PYTHONPATH", pythonpath())
    monkeypatch.syspath_prepend(str(HERE))
    return Job(tmp_path)


@pytest.fixture
def no_leftover_servers(job: Job) -> Iterator[None]:
    """Fails a test that leaves a server process of its job behind."""
    yield from _no_leftover_servers(job.root)
