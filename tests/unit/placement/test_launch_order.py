"""Launch order from server_refs: dependencies first, concurrent within a wave."""

from __future__ import annotations

import pytest

from rollgym.config import validate_config
from rollgym.errors import LaunchError
from rollgym.placement.launcher import dependencies, launch_waves
from server_specs import quickstart_servers


def test_models_and_environments_before_the_agents_that_name_them(tmp_path):
    config = validate_config(
        {
            "run": {"input": str(tmp_path / "rows.jsonl"), "agent": "solver"},
            "servers": quickstart_servers(
                episodes=False,
                remote={"kind": "model", "url": "http://127.0.0.1:1"},
                arith={"model": "policy"},
                walker={"model": "remote"},
            ),
        }
    )
    deps = dependencies(config)
    assert deps == {
        "policy": set(),
        "arith": {"policy"},
        "keys": set(),
        "solver": {"policy", "arith"},
        "walker": {"remote", "keys"},
    }
    assert launch_waves(deps) == [["keys", "policy"], ["arith", "walker"], ["solver"]]


def test_a_cycle_is_a_launch_error():
    with pytest.raises(LaunchError, match="cycle"):
        launch_waves({"a": {"b"}, "b": {"a"}, "c": set()})
