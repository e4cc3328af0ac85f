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

from collections.abc import Iterator

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


# --- real trace backends on loopback (tests/backends.py), one per test module ---------------------
@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Arize Phoenix's base URL (skipped without the ``phoenix`` extra)."""
    pytest.importorskip("phoenix", reason="the 'phoenix' extra is not installed")
    from backends import phoenix_server

    with phoenix_server(tmp_path_factory.mktemp("phoenix")) as base:
        yield base


@pytest.fixture(scope="module")
def mlflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An MLflow tracking server's base URL (skipped where scripts/test.sh did not install
    MLflow's venv)."""
    from backends import MLFLOW_OK, MLFLOW_VENV, mlflow_server

    if not MLFLOW_OK.exists():
        pytest.skip(f"MLflow is not installed in {MLFLOW_VENV} (scripts/test.sh)")
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as base:
        yield base
