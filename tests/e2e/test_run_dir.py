"""One run owns its output directory; a resume keeps what defines the run; Ctrl-C says how
to resume. Each test runs the real ``rollgym run`` with real servers on loopback."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys

import orjson
import pytest
from e2e_support import Job, agent

pytestmark = pytest.mark.e2e

ROWS = 120


def _slow_job(job: Job, **run: object) -> None:
    job.write(
        {"a": agent(delay_s=0.5)}, [{"q": i} for i in range(ROWS)], agent="a", concurrency=8, **run
    )


def _each_rollout_once(job: Job, rows: int = ROWS) -> None:
    keys = [(r["task_index"], r["rollout_index"]) for r in job.rollouts]
    assert len(keys) == len(set(keys)), "a rollout was written twice"
    assert sorted(keys) == [(i, 0) for i in range(rows)]


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def test_a_second_run_on_a_busy_output_dir_is_refused_naming_the_first(
    job: Job, no_leftover_servers: None
) -> None:
    _slow_job(job)
    first = job.start()
    try:
        job.wait_rollouts(10)
        second = job.run(timeout=60)
        assert second.returncode == 1, second.stdout + second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert f"is in use by another run (pid {first.pid}" in lines[0] and " since " in lines[0]
        assert "Traceback" not in second.stderr
        output, _ = first.communicate(timeout=120)
    finally:
        _stop(first)
    assert first.returncode == 0, output
    _each_rollout_once(job)  # the refused run wrote nothing
    assert job.summary["requested"] == job.summary["completed"] == ROWS


def test_a_resume_with_another_input_or_capture_is_refused_and_loses_nothing(
    job: Job, no_leftover_servers: None
) -> None:
    job.write({"a": agent()}, [{"q": i} for i in range(3)], agent="a")
    assert job.run().returncode == 0
    before = {name: (job.out / name).read_bytes() for name in ("rollouts.jsonl", "run.json")}
    job.write_rows([{"q": i} for i in range(5)])
    changed = job.run()
    assert changed.returncode == 2, changed.stdout + changed.stderr
    assert changed.stderr.count("\n") == 1 and "run.input" in changed.stderr
    assert "has changed since the run began" in changed.stderr
    assert "another run.output_dir" in changed.stderr
    job.write_rows([{"q": i} for i in range(3)])  # the same bytes again
    capture = job.run("run.trajectories=true")
    assert capture.returncode == 2 and "run.trajectories was False, now True" in capture.stderr
    assert {name: (job.out / name).read_bytes() for name in before} == before
    again = job.run()
    assert again.returncode == 0, again.stderr
    assert (
        "rollgym: resuming" in again.stderr and "3 of 3 rollouts already recorded" in again.stderr
    )
    assert "0 to run" in again.stderr


def test_a_folder_written_before_the_record_resumes_and_records_it(
    job: Job, no_leftover_servers: None
) -> None:
    job.write({"a": agent()}, [{"q": i} for i in range(4)], agent="a")
    assert job.run().returncode == 0
    run_file = job.out / "run.json"
    old = orjson.loads(run_file.read_bytes())
    old.pop("defines")
    run_file.write_bytes(orjson.dumps(old))  # what today's main writes
    first_line = (job.out / "rollouts.jsonl").read_bytes().splitlines(keepends=True)[0]
    (job.out / "rollouts.jsonl").write_bytes(first_line)
    resumed = job.run()
    assert resumed.returncode == 0, resumed.stderr
    assert "1 of 4 rollouts already recorded (1 completed, 0 failed), 3 to run" in resumed.stderr
    _each_rollout_once(job, 4)
    record = orjson.loads(run_file.read_bytes())["defines"]
    assert record["input"] == str(job.input) and len(record["input_sha256"]) == 64


def test_ctrl_c_of_the_terminal_says_how_to_resume_and_no_store_death(job: Job) -> None:
    """SIGINT to the driver's whole process group, as a terminal sends it, with the trace
    store launched: the store is not reported dead, and the printed command resumes."""
    _slow_job(job)
    env = {k: v for k, v in job.env().items() if not k.startswith("OTEL_")}
    job.write(
        {"a": agent(delay_s=0.5)},
        agent="a",
        concurrency=8,
        telemetry={"preset": "default"},
    )
    proc = subprocess.Popen(
        job.command(),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=job.root,
        start_new_session=True,  # its own group, like a shell's foreground job
    )
    try:
        job.wait_rollouts(10, timeout=120)
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=90)
    finally:
        _stop(proc)
    assert proc.returncode == 130, output
    assert "trace store died" not in output and "was restarted" not in output, output
    (line,) = [text for text in output.splitlines() if "to resume: " in text]
    command = shlex.split(line.split("to resume: ", 1)[1])
    assert command[:3] == ["rollgym", "run", str(job.config_path)]
    rerun = subprocess.run(
        [sys.executable, "-m", *command], env=env, capture_output=True, text=True, timeout=180
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "rollgym: resuming" in rerun.stderr
    _each_rollout_once(job)


def test_a_run_whose_every_row_fails_says_so_as_it_happens_and_at_the_end(
    job: Job, no_leftover_servers: None
) -> None:
    job.write({"a": agent()}, [{"q": i, "agent": "ghost"} for i in range(5)], agent="a")
    proc = job.run()
    assert proc.returncode == 0, proc.stderr
    failures = [text for text in proc.stderr.splitlines() if text.startswith("rollgym: failure")]
    assert len(failures) == 1 and "(unknown_agent) 0-0: " in failures[0], proc.stderr
    assert "no rollout completed; all 5 failed (unknown_agent: 5)" in proc.stderr


def test_an_empty_input_says_it_has_no_rows(job: Job, no_leftover_servers: None) -> None:
    job.write({"a": agent()}, agent="a")
    job.input.write_text("")
    proc = job.run()
    assert proc.returncode == 0, proc.stderr
    table = " ".join(proc.stdout.split())  # rich wraps the line to the terminal width
    assert "nothing ran: the input has no rows" in table
    assert "earlier session" not in table
