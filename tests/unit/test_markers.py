"""The markers tests/conftest.py gives by folder, file and fixture (what ``-m 'not slow'`` skips)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "rollgym_tests_root_conftest", Path(__file__).resolve().parents[1] / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conftest)


def test_unit_tests_are_fast_unless_they_start_a_run() -> None:
    assert conftest.markers_for(("unit", "driver", "test_rows.py"), set()) == set()
    assert conftest.markers_for(("unit", "x", "test_y.py"), {"job", "tmp_path"}) == {"slow"}


def test_the_heavy_folders_and_files_are_slow() -> None:
    assert conftest.markers_for(("e2e", "test_serve.py"), set()) == {"slow"}
    assert conftest.markers_for(("faults", "test_edges.py"), set()) == {"slow"}
    assert conftest.markers_for(("browser", "test_viewer.py"), set()) == {"browser", "slow"}
    assert conftest.markers_for(("e2e", "test_ray_placement.py"), set()) == {"ray", "slow"}
    assert conftest.markers_for(("e2e", "test_real_engine.py"), set()) == {"engine", "slow"}
    assert conftest.markers_for(("e2e", "test_real_vllm.py"), set()) == {
        "engine",
        "vllm",
        "slow",
    }
    assert conftest.markers_for(("e2e", "test_tracestore_phoenix.py"), set()) == {
        "phoenix",
        "slow",
    }


def test_every_marker_given_is_registered() -> None:
    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    markers = tomllib.loads(pyproject.read_text())["tool"]["pytest"]["ini_options"]["markers"]
    registered = {line.split(":")[0] for line in markers}
    assert {"slow", *conftest.HEAVY_MARKERS} <= registered
