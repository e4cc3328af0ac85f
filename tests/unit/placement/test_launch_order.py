"""Launch order from server_refs: dependencies first, concurrent within a wave."""

from __future__ import annotations

import pytest

from rollgym.config import validate_config
from rollgym.errors import LaunchError
from rollgym.placement.launcher import dependencies, launch_waves


def test_models_and_environments_before_the_agents_that_name_them(tmp_path):
    config = validate_config(
        {
            "run": {"input": str(tmp_path / "rows.jsonl"), "agent": "solver"},
            "servers": {
                "policy": {"kind": "model", "impl": "simulated"},
                "remote": {"kind": "model", "url": "http://127.0.0.1:1"},
                "arith": {"kind": "environment", "impl": "arithmetic", "model": "policy"},
                "keys": {"kind": "environment", "impl": "keychain"},
                "solver": {
                    "kind": "agent",
                    "impl": "single_turn",
                    "model": "policy",
                    "environment": "arith",
                },
                "walker": {
                    "kind": "agent",
                    "impl": "tool_loop",
                    "model": "remote",
                    "environment": "keys",
                },
            },
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
