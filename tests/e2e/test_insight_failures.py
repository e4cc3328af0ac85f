"""A failure raised in an agent author's own code, on a real run: its own frames and the log
with the whole traceback on the failure record, the turns recorded before it failed kept and
shown, and the terminal's hint right about trajectories (the run did record them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest
from e2e_support import Job
from insight_run import failure_run, parse_line

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return failure_run(tmp_path_factory.mktemp("failures"))


def _rollgym(run: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return Job(run.parent).cli(*args)


def _failures(run: Path) -> dict[str, dict[str, object]]:
    lines = (run / "failures.jsonl").read_bytes().splitlines()
    return {r["rollout_id"]: r for r in map(orjson.loads, lines)}


def test_failure_record_has_the_authors_frames_log_and_partial_trajectory(run: Path) -> None:
    failure = _failures(run)["0-0"]
    frames = failure["frames"]
    assert isinstance(frames, list)
    assert frames[-1].endswith(f"failing_user_agent.py:{parse_line()} in parse_answer")
    assert all("/rollgym/" not in frame for frame in frames)  # only the author's frames
    assert failure["log"] == "logs/parser.log"
    log = (run / "logs" / "parser.log").read_text()
    assert "Traceback" in log and f"line {parse_line()}, in parse_answer" in log
    partial = failure["partial_trajectory"]
    assert isinstance(partial, dict)
    (turn,) = [t for t in partial["turns"] if t["type"] == "model"]
    assert turn["messages"] == [{"role": "user", "content": "2 + 2"}]
    # a rollout without a reward is never training data: trajectories.jsonl has no line of it
    kept = [
        orjson.loads(x)["rollout_id"]
        for x in (run / "trajectories.jsonl").read_bytes().splitlines()
    ]
    assert kept == ["2-0"]
    # the agent that failed before any model call: no frames of its own beyond agents.py,
    # and no partial trajectory (nothing was recorded)
    broken = _failures(run)["1-0"]
    assert "partial_trajectory" not in broken


def test_terminal_shows_frames_log_and_the_turns_before_the_failure(run: Path) -> None:
    shown = _rollgym(run, "traces", "show", str(run), "0-0", "--conversation")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert f"failing_user_agent.py:{parse_line()} in parse_answer" in out
    assert "whole traceback: logs/parser.log" in out
    assert "partial trajectory" in out and "2 + 2" in out
    assert "run.trajectories=true" not in out
    tree = _rollgym(run, "traces", "show", str(run), "0-0")
    assert f"failing_user_agent.py:{parse_line()} in parse_answer" in tree.stdout
    assert "whole traceback: logs/parser.log" in tree.stdout
    as_json = orjson.loads(_rollgym(run, "traces", "show", str(run), "0-0", "--json").stdout)
    assert as_json["failure"]["log"] == "logs/parser.log"


def test_conversation_hint_says_the_run_records_trajectories(run: Path) -> None:
    shown = _rollgym(run, "traces", "show", str(run), "1-0", "--conversation")
    assert shown.returncode == 0, shown.stderr
    assert "the run records trajectories" in shown.stdout
    assert "run.trajectories=true" not in shown.stdout


def test_rollout_span_stack_holds_the_authors_frames(run: Path) -> None:
    shown = _rollgym(run, "traces", "show", str(run), "0-0", "--json")
    detail = orjson.loads(shown.stdout)
    stacks = [
        event["attributes"]["exception.stacktrace"]
        for attempt in detail["attempts"]
        for span in attempt["spans"]
        if span["name"] == "gym.rollout"
        for event in span["events"] or []
        if "exception.stacktrace" in (event.get("attributes") or {})
    ]
    assert stacks, "the agent's rollout span recorded no exception"
    assert f'failing_user_agent.py", line {parse_line()}, in parse_answer' in stacks[0]
