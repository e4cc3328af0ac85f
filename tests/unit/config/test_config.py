"""Config load and overrides: every error names the file and the key path, before any launch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rollgym.config import load_config, parse_override, redacted
from rollgym.errors import ConfigError
from server_specs import agent_spec


def _config(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _base(**run: Any) -> dict[str, Any]:
    return {
        "run": {"input": "rows.jsonl", "agent": "solver", **run},
        "servers": {
            "policy": {"kind": "model", "impl": "simulated"},
            "arith": {"kind": "environment", "impl": "arithmetic"},
            "solver": agent_spec("single_turn", "arith"),
        },
    }


def test_valid_config_with_overrides_and_relative_input(tmp_path: Path) -> None:
    path = _config(tmp_path, _base())
    config = load_config(path, ["run.concurrency=256", "run.repeats=8"])
    assert config.run.concurrency == 256 and config.run.repeats == 8
    assert config.run.input == tmp_path / "rows.jsonl"
    assert config.servers["solver"].options == {"model": "policy", "environment": "arith"}


def _error(tmp_path: Path, data: dict[str, Any], overrides: tuple[str, ...] = ()) -> ConfigError:
    path = _config(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_config(path, list(overrides))
    return info.value


def test_unknown_key_names_file_and_path(tmp_path: Path) -> None:
    error = _error(tmp_path, _base(concurency=4))
    assert error.key_path == "run.concurency" and str(tmp_path / "job.yaml") in str(error)
    assert "unknown key" in str(error)


def test_wrong_type_names_key_and_value(tmp_path: Path) -> None:
    error = _error(tmp_path, _base(), ("run.concurrency=lots",))
    assert error.key_path == "run.concurrency" and "'lots'" in str(error)


def test_out_of_range_value(tmp_path: Path) -> None:
    assert _error(tmp_path, _base(repeats=0)).key_path == "run.repeats"


@pytest.mark.parametrize("override", ["run.concurrency", "=3", "run..x=1"])
def test_bad_override_syntax(tmp_path: Path, override: str) -> None:
    error = _error(tmp_path, _base(), (override,))
    assert error.source == "<overrides>"


def test_an_override_value_that_is_not_yaml_names_the_override(tmp_path: Path) -> None:
    error = _error(tmp_path, _base(), ("run.concurrency=[unclosed",))
    assert error.source == "override run.concurrency=[unclosed"
    assert error.key_path == "run.concurrency" and "\n" not in str(error)


def test_override_below_a_scalar(tmp_path: Path) -> None:
    error = _error(tmp_path, _base(), ("run.agent.x=1",))
    assert "not a mapping" in str(error)


def test_missing_required_key(tmp_path: Path) -> None:
    data = _base()
    del data["run"]["input"]
    assert _error(tmp_path, data).key_path == "run.input"


def test_unknown_server_option(tmp_path: Path) -> None:
    data = _base()
    data["servers"]["solver"]["max_turnz"] = 3
    assert _error(tmp_path, data).key_path == "servers.solver.max_turnz"


def test_reference_to_a_missing_server(tmp_path: Path) -> None:
    data = _base()
    data["servers"]["solver"]["model"] = "ghost"
    error = _error(tmp_path, data)
    assert error.key_path == "servers.solver.model" and "'ghost'" in str(error)


def test_reference_to_a_server_of_the_wrong_kind(tmp_path: Path) -> None:
    data = _base()
    data["servers"]["solver"]["model"] = "arith"
    error = _error(tmp_path, data)
    assert error.key_path == "servers.solver.model" and "expected a model server" in str(error)


def test_run_agent_must_be_an_agent(tmp_path: Path) -> None:
    assert _error(tmp_path, _base(agent="arith")).key_path == "run.agent"


def test_route_must_name_an_environment(tmp_path: Path) -> None:
    error = _error(tmp_path, _base(environment_routes={"math": "solver"}))
    assert error.key_path == "run.environment_routes.math"


def test_impl_xor_url(tmp_path: Path) -> None:
    data = _base()
    data["servers"]["extra"] = {"kind": "agent"}
    assert _error(tmp_path, data).key_path.startswith("servers.extra")


def test_unknown_impl(tmp_path: Path) -> None:
    data = _base()
    data["servers"]["solver"]["impl"] = "no_such_agent"
    assert _error(tmp_path, data).key_path == "servers.solver.impl"


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("run: [unclosed", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)
    path.write_text("- a list\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(path)


def test_parse_override_values_are_yaml() -> None:
    assert parse_override("run.repeats=8") == (["run", "repeats"], 8)
    assert parse_override("telemetry.preset=[rollout, http]") == (
        ["telemetry", "preset"],
        ["rollout", "http"],
    )


def test_redacted_is_plain_data_with_the_resolved_values(tmp_path: Path) -> None:
    data = _base()
    data["servers"]["gpt"] = {"kind": "model", "url": "http://127.0.0.1:9"}
    dumped = redacted(load_config(_config(tmp_path, data)))
    assert (
        dumped["run"]["concurrency"] == 64
        and dumped["servers"]["gpt"]["url"] == "http://127.0.0.1:9"
    )
    yaml.safe_dump(dumped)  # config.yaml is written from it


def test_a_bare_yaml_off_is_the_off_preset(tmp_path) -> None:
    """``preset: off`` (and the override ``telemetry.preset=off``) parse as YAML false."""
    path = tmp_path / "job.yaml"
    path.write_text("run: {input: rows.jsonl}\ntelemetry: {preset: off}\n")
    assert load_config(path).telemetry.preset == "off"
    path.write_text("run: {input: rows.jsonl}\n")
    assert load_config(path, ["telemetry.preset=off"]).telemetry.preset == "off"


def test_sampling_option_names_the_bad_key(tmp_path: Path) -> None:
    data = _base()
    data["servers"]["solver"]["sampling"] = {"temperature": 0.5, "n": 4}
    error = _error(tmp_path, data)
    assert error.key_path == "servers.solver.sampling" and "'n' is not supported" in str(error)
    data["servers"]["solver"]["sampling"] = {"temprature": 0.5}
    assert "unknown sampling parameter 'temprature'" in str(_error(tmp_path, data))


def test_a_mapping_of_server_references_is_checked(tmp_path: Path) -> None:
    data = _base()
    data["servers"]["nemo"] = {
        "kind": "agent",
        "impl": "nemo_gym_row",
        "model": "policy",
        "environments": {"math_agent": "arith", "vault_agent": "policy"},
    }
    error = _error(tmp_path, data)
    assert error.key_path == "servers.nemo.environments.vault_agent"
    assert "expected an environment server" in str(error)
    data["servers"]["nemo"]["environments"]["vault_agent"] = "arith"
    config = load_config(_config(tmp_path, data), ["run.capture_tokens=true"])
    assert config.run.capture_tokens is True and config.run.trajectories is False


def test_run_pass_threshold_is_each_launched_environments_unless_it_sets_its_own(
    tmp_path: Path,
) -> None:
    """One meaning of ``pass_threshold`` per job: summary.json's pass@k and an environment's
    ``pass_rate`` count the same rollouts as passed, unless the environment says otherwise."""
    data = _base()
    data["servers"]["strict"] = {"kind": "environment", "impl": "arithmetic", "pass_threshold": 1}
    data["servers"]["remote"] = {"kind": "environment", "url": "http://127.0.0.1:9"}
    config = load_config(_config(tmp_path, data), ["run.pass_threshold=0.5"])
    assert config.run.pass_threshold == 0.5
    arith = config.servers["arith"]
    assert arith.options == {"pass_threshold": 0.5}  # what the launcher hands the server
    assert arith.validated_options().pass_threshold == 0.5  # type: ignore[attr-defined]
    assert config.servers["strict"].options == {"pass_threshold": 1}
    assert config.servers["remote"].options == {}  # not launched: it takes no options
    assert config.servers["policy"].options == {}  # a model has no pass threshold


def test_without_run_pass_threshold_environments_keep_their_default(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, _base()))
    assert config.servers["arith"].options == {}
    assert config.servers["arith"].validated_options().pass_threshold == 1.0  # type: ignore[attr-defined]
