"""The resume ledger: torn last line, bitmap, failures to rerun, streaming records."""

from __future__ import annotations

from pathlib import Path

import orjson

from rollgym.driver.outcomes import RolloutFailure, RolloutResult
from rollgym.driver.output import Bitmap, Ledger, OutcomeWriter


def _result(t: int, r: int) -> RolloutResult:
    return RolloutResult(f"{t}-{r}", t, r, 0, "a", 1.0, 0.1, None, 1.0, 1.1, {"reward": 1.0})


def _failure(t: int, r: int | None, kind: str) -> RolloutFailure:
    return RolloutFailure(f"{t}-{r}", t, r, 0, "a", kind, "m", 1)


def test_bitmap_grows_and_answers() -> None:
    bits = Bitmap()
    for index in (0, 7, 8, 2_400_000):
        bits.add(index)
    assert all(i in bits for i in (0, 7, 8, 2_400_000))
    assert 1 not in bits and 2_399_999 not in bits and 10**9 not in bits
    assert bits.nbytes < 700_000


def test_writer_and_ledger_round_trip_with_torn_line(tmp_path: Path) -> None:
    with OutcomeWriter(tmp_path) as writer:
        writer.write(_result(0, 0))
        writer.write(_result(0, 1))
        writer.write(_failure(1, 0, "http_4xx"))
        writer.write(_failure(1, 1, "cancelled"))
        writer.write(_failure(2, None, "invalid_row"))
    with open(tmp_path / "rollouts.jsonl", "ab") as handle:
        handle.write(b'{"rollout_id": "3-0", "task_ind')  # kill -9 mid-write
    fed: list[tuple[str, bool]] = []
    ledger = Ledger.load(
        tmp_path, 2, retry_failed=False, feed=lambda rec, ok: fed.append((rec["rollout_id"], ok))
    )
    assert fed == [("0-0", True), ("0-1", True), ("1-0", False), ("2-None", False)]
    assert ledger.skip(0, 0) and ledger.skip(0, 1) and ledger.skip(1, 0) and ledger.skip(2, 0)
    assert not ledger.skip(1, 1)  # cancelled: runs again
    assert not ledger.skip(3, 0)  # the torn line is gone
    assert (tmp_path / "rollouts.jsonl").read_bytes().endswith(b"\n")
    kinds = [
        orjson.loads(line)["error_kind"]
        for line in (tmp_path / "failures.jsonl").read_bytes().splitlines()
    ]
    assert kinds == ["http_4xx", "invalid_row"]


def test_retry_failed_reruns_every_failure(tmp_path: Path) -> None:
    with OutcomeWriter(tmp_path) as writer:
        writer.write(_result(0, 0))
        writer.write(_failure(1, 0, "http_4xx"))
    ledger = Ledger.load(tmp_path, 1, retry_failed=True, feed=lambda rec, ok: None)
    assert ledger.skip(0, 0) and not ledger.skip(1, 0)
    assert (tmp_path / "failures.jsonl").read_bytes() == b""


def test_fresh_directory_has_nothing_to_skip(tmp_path: Path) -> None:
    ledger = Ledger.load(tmp_path, 4, retry_failed=False, feed=lambda rec, ok: None)
    assert ledger.resumed == 0 and not ledger.skip(0, 0)


def _traced(t: int, r: int) -> RolloutResult:
    trajectory = {"version": 1, "capture": "turns", "turns": [{"type": "model", "call": 0}]}
    return RolloutResult(
        f"{t}-{r}", t, r, 0, "a", 1.0, 0.1, None, 1.0, 1.1, {"reward": 1.0}, True, trajectory
    )


def test_trajectory_lines_are_pointed_at_and_orphans_cut_on_resume(tmp_path: Path) -> None:
    with OutcomeWriter(tmp_path) as writer:
        writer.write(_traced(0, 0))
        writer.write(_failure(1, 0, "http_4xx"))  # a failure has no trajectory
        writer.write(_traced(2, 0))
    good = (tmp_path / "trajectories.jsonl").read_bytes()
    records = [
        orjson.loads(line) for line in (tmp_path / "rollouts.jsonl").read_bytes().splitlines()
    ]
    for record in records:
        pointer = record["trajectory"]
        line = orjson.loads(good[pointer["offset"] : pointer["offset"] + pointer["bytes"]])
        assert line["rollout_id"] == record["rollout_id"] and line["trajectory"]["turns"]
        assert "trajectory" not in record["result"]
    # kill -9 after a trajectory line, before its rollout line; then a torn trajectory line
    with open(tmp_path / "trajectories.jsonl", "ab") as handle:
        handle.write(orjson.dumps(_traced(3, 0).trajectory_record()) + b"\n")
        handle.write(b'{"rollout_id": "4-0", "task_ind')
    ledger = Ledger.load(tmp_path, 1, retry_failed=False, feed=lambda record, ok: None)
    assert (tmp_path / "trajectories.jsonl").read_bytes() == good
    assert ledger.skip(0, 0) and ledger.skip(2, 0) and not ledger.skip(3, 0)
    with OutcomeWriter(tmp_path) as writer:  # the resumed session appends after the good part
        writer.write(_traced(3, 0))
    (last,) = [
        orjson.loads(line)
        for line in (tmp_path / "rollouts.jsonl").read_bytes().splitlines()
        if b'"3-0"' in line
    ]
    assert last["trajectory"]["offset"] == len(good)
