"""Markers applied by where a test lives and what it uses, so the fast part runs alone.

``pytest -m "not slow"`` runs the unit tests in minutes; the whole suite (``scripts/test.sh``,
``.ci/run``) still runs everything. A test is marked

- ``slow``: it is under ``e2e/``, ``faults/`` or ``browser/``, or uses the ``job`` fixture
  (a real run with launched servers), or carries one of the heavy markers below;
- ``ray``: its file is a Ray test (``test_ray_*.py``): a Ray cluster starts;
- ``engine``: it serves a real model (``test_real_engine*.py``, ``test_real_vllm.py``);
- ``browser`` / ``phoenix`` / ``vllm``: as their own files already say.

Nothing here skips a test: markers only select.
"""

from __future__ import annotations

import pytest

SLOW_FOLDERS = frozenset({"e2e", "faults", "browser"})
#: Fixtures that start real servers or processes for the test.
SLOW_FIXTURES = frozenset({"job", "no_leftover_servers"})
HEAVY_MARKERS = ("ray", "engine", "browser", "phoenix", "vllm")


def markers_for(parts: tuple[str, ...], fixtures: frozenset[str] | set[str]) -> set[str]:
    """The markers a test gets from its path (``parts``, relative to ``tests/``) and fixtures."""
    name = parts[-1] if parts else ""
    found: set[str] = set()
    if name.startswith("test_ray_"):
        found.add("ray")
    if name.startswith(("test_real_engine", "test_real_vllm")):
        found.add("engine")
    if name.startswith("test_real_vllm"):
        found.add("vllm")
    if "browser" in parts[:-1]:
        found.add("browser")
    if "phoenix" in name:
        found.add("phoenix")
    if SLOW_FOLDERS & set(parts[:-1]) or SLOW_FIXTURES & set(fixtures) or found:
        found.add("slow")
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath / "tests"
    for item in items:
        try:
            parts = item.path.relative_to(root).parts
        except ValueError:
            continue
        fixtures = set(getattr(item, "fixturenames", ()))
        present = {mark.name for mark in item.iter_markers()}
        wanted = markers_for(parts, fixtures)
        if present & set(HEAVY_MARKERS):
            wanted.add("slow")
        for name in sorted(wanted - present):
            item.add_marker(getattr(pytest.mark, name))
