"""The run id and output directory a job resolves before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollgym.config import validate_config
from rollgym.driver.job import resolve_run


def test_default_output_dir_is_named_after_the_run_id_it_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run_id, output_dir = resolve_run(validate_config({"run": {"input": "rows.jsonl"}}))
    assert output_dir == Path("runs") / run_id


def test_a_given_run_id_names_the_default_output_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = validate_config({"run": {"input": "rows.jsonl", "run_id": "r1"}})
    assert resolve_run(config) == ("r1", Path("runs") / "r1")
