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


async def test_a_replica_the_supervisor_saw_die_is_held_out_by_the_drivers_client() -> None:
    from rollgym.driver.collector import Collector
    from rollgym.driver.job import replica_rotation
    from rollgym.server_urls import ServerUrls

    replicas = ["http://127.0.0.1:1001", "http://127.0.0.1:1002", "http://127.0.0.1:1003"]
    urls = ServerUrls({"a": replicas[0]}, replicas={"a": replicas})
    async with Collector({"a": replicas[0]}, agent="a", replicas=urls.replicas) as collector:
        changed = replica_rotation(collector, urls)
        target = collector.client.replicas.for_url(replicas[0])
        assert target is not None
        changed("a@2", False)  # died: out, and no pick tries it
        assert target.held == {replicas[2]}
        assert {target.pick() for _ in range(6)} == set(replicas[:2])
        changed("a@2", True)  # its restart is healthy
        assert target.held == set()
        assert {target.pick() for _ in range(6)} == set(replicas)
        changed("other", False)  # not a replica of a launched server: nothing to do
        assert target.held == set()


def test_the_input_is_a_regular_file_or_dev_null(tmp_path: Path) -> None:
    import os

    from rollgym.driver.job import input_problem

    rows = tmp_path / "rows.jsonl"
    rows.write_text("{}\n")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert input_problem(rows) is None
    assert input_problem(Path(os.devnull)) is None
    assert input_problem(tmp_path / "missing") == "does not exist"
    assert input_problem(tmp_path) == "is a directory, not a JSONL file"
    assert (input_problem(fifo) or "").startswith("is a named pipe, not a regular file")
