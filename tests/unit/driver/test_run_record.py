"""What defines a run: recorded once, compared on every resume, one line naming the change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rollgym.config import validate_config
from rollgym.driver.run_record import RECORD_KEY, RunRecord, check_resume, with_record
from rollgym.errors import ConfigError


def _config(tmp_path: Path, **run: Any) -> Any:
    rows = tmp_path / "rows.jsonl"
    if not rows.exists():
        rows.write_text('{"q": 1}\n')
    data = {
        "run": {"input": str(rows), "agent": "a", **run},
        "servers": {"a": {"kind": "agent", "url": "http://127.0.0.1:9"}},
    }
    return validate_config(data)


def _stored(record: RunRecord) -> dict[str, Any]:
    run = {"run_id": "r", "repeats": record.repeats, "input": record.input}
    result = with_record(run, record)
    assert result is not None
    return result


def test_the_same_run_resumes(tmp_path: Path) -> None:
    record = RunRecord.of(_config(tmp_path))
    check_resume(tmp_path, _stored(record), record)
    assert with_record(_stored(record), record) is None  # kept as it is


def test_a_changed_input_file_is_refused_naming_run_input(tmp_path: Path) -> None:
    before = _stored(RunRecord.of(_config(tmp_path)))
    (tmp_path / "rows.jsonl").write_text('{"q": 2}\n')
    with pytest.raises(ConfigError) as caught:
        check_resume(tmp_path / "out", before, RunRecord.of(_config(tmp_path)))
    message = str(caught.value)
    assert caught.value.key_path == "run.input"
    assert "has changed since the run began" in message and "another run.output_dir" in message


def test_another_input_file_is_refused_naming_both(tmp_path: Path) -> None:
    before = _stored(RunRecord.of(_config(tmp_path)))
    other = tmp_path / "other.jsonl"
    other.write_text('{"q": 3}\n')
    with pytest.raises(ConfigError, match="other.jsonl") as caught:
        check_resume(tmp_path, before, RunRecord.of(_config(tmp_path, input=str(other))))
    assert str(tmp_path / "rows.jsonl") in str(caught.value)


def test_the_same_bytes_moved_elsewhere_still_resume(tmp_path: Path) -> None:
    before = _stored(RunRecord.of(_config(tmp_path)))
    moved = tmp_path / "moved.jsonl"
    moved.write_bytes((tmp_path / "rows.jsonl").read_bytes())
    check_resume(tmp_path, before, RunRecord.of(_config(tmp_path, input=str(moved))))


@pytest.mark.parametrize(
    ("key", "value"),
    [("trajectories", True), ("capture_tokens", True), ("agent", "b")],
)
def test_capture_and_routing_changes_are_refused(tmp_path: Path, key: str, value: Any) -> None:
    before = _stored(RunRecord.of(_config(tmp_path)))
    extra: dict[str, Any] = {key: value}
    if key == "agent":
        config = _config(tmp_path)
        now = RunRecord(**{**RunRecord.of(config).to_json(), "agent": value})
    else:
        now = RunRecord.of(_config(tmp_path, **extra))
    with pytest.raises(ConfigError) as caught:
        check_resume(tmp_path, before, now)
    assert caught.value.key_path == f"run.{key}"
    assert f"run.{key} was " in str(caught.value)


def test_settings_that_do_not_define_the_run_may_change(tmp_path: Path) -> None:
    before = _stored(RunRecord.of(_config(tmp_path)))
    now = RunRecord.of(_config(tmp_path, concurrency=7, max_attempts=5, retry_failed=True))
    check_resume(tmp_path, before, now)


def test_a_folder_written_before_the_record_resumes_and_gets_one(tmp_path: Path) -> None:
    record = RunRecord.of(_config(tmp_path))
    old = {"run_id": "r", "repeats": 1, "input": record.input}
    check_resume(tmp_path, old, record)  # nothing to compare
    written = with_record(old, record)
    assert written is not None and written[RECORD_KEY]["input_sha256"] == record.input_sha256
    check_resume(tmp_path, None, record)  # a new run


def test_an_agents_own_capture_setting_is_part_of_the_run(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"q": 1}\n')

    def config(capture: bool | None) -> Any:
        solver: dict[str, Any] = {
            "kind": "agent",
            "impl": "single_turn",
            "model": "m",
            "environment": "e",
        }
        if capture is not None:
            solver["trajectories"] = capture
        servers = {
            "m": {"kind": "model", "impl": "simulated"},
            "e": {"kind": "environment", "impl": "arithmetic"},
            "solver": solver,
        }
        return validate_config({"run": {"input": str(rows), "agent": "solver"}, "servers": servers})

    before = _stored(RunRecord.of(config(None)))
    assert before[RECORD_KEY]["server_capture"] == {}
    with pytest.raises(ConfigError) as caught:
        check_resume(tmp_path, before, RunRecord.of(config(True)))
    assert caught.value.key_path == "servers.solver.trajectories"
    assert "servers.solver.trajectories was None, now True" in str(caught.value)
    check_resume(tmp_path, _stored(RunRecord.of(config(True))), RunRecord.of(config(True)))
