"""Edges of the run directory and the reading commands: each is one line naming where the
problem is (path, key, port), a non-zero exit, no traceback, nothing already written lost."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from e2e_support import Job, agent

from rollgym.tracestore.store import EXIT_UNUSABLE_STORE, TraceStore

pytestmark = pytest.mark.e2e


def _one_line(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_an_output_dir_that_cannot_be_made_is_one_line(job: Job) -> None:
    job.write({"a": agent()}, [{"q": 0}], agent="a")
    (job.root / "afile").write_text("not a folder")
    line = _one_line(job.run(f"run.output_dir={job.root / 'afile' / 'out'}"), 2)
    assert "run.output_dir: cannot write the output directory" in line
    assert str(job.root / "afile" / "out") in line


def test_a_resume_into_an_unusable_dir_is_one_line_and_keeps_the_records(
    job: Job, no_leftover_servers: None
) -> None:
    job.write({"a": agent()}, [{"q": i} for i in range(3)], agent="a")
    assert job.run().returncode == 0
    rollouts = (job.out / "rollouts.jsonl").read_bytes()
    shutil.rmtree(job.out / "logs")
    (job.out / "logs").write_text("in the way")  # the servers' log folder cannot be made
    line = _one_line(job.run(), 2)
    assert "run.output_dir: cannot write the output directory" in line and "logs" in line
    assert (job.out / "rollouts.jsonl").read_bytes() == rollouts


@pytest.mark.parametrize("record", ["rollouts.jsonl", "failures.jsonl", "trajectories.jsonl"])
def test_a_resume_with_a_folder_in_place_of_a_record_file_is_one_line(
    job: Job, no_leftover_servers: None, record: str
) -> None:
    job.write({"a": agent()}, [{"q": i} for i in range(3)], agent="a", trajectories=True)
    assert job.run().returncode == 0
    kept = {path.name: path.read_bytes() for path in job.out.glob("*.jsonl")}
    (job.out / record).unlink()
    (job.out / record).mkdir()
    line = _one_line(job.run(), 2)
    assert line == (
        f"rollgym: config error: run.output_dir: cannot write the output directory {job.out}: "
        f"Is a directory ({job.out / record}); give a writable run.output_dir"
    ), line
    for name, data in kept.items():
        if name != record:
            assert (job.out / name).read_bytes() == data, name
    assert not list(job.out.glob("*.tmp"))
    if record != "trajectories.jsonl":  # what compare reads
        compare = job.cli("compare", str(job.out), str(job.out), timeout=60)
        assert _one_line(compare, 2) == f"rollgym compare: {job.out / record}: Is a directory"


def test_reading_commands_on_a_corrupt_or_missing_store_are_one_line(job: Job) -> None:
    job.root.mkdir(parents=True, exist_ok=True)
    run_dir = job.root / "run"
    run_dir.mkdir()
    (run_dir / "traces.db").write_bytes(b"this is not sqlite" * 100)
    for command in ("ls", "check", "slowest", "profile"):
        line = _one_line(job.cli("traces", command, str(run_dir), timeout=60), 2)
        assert line.startswith(f"rollgym traces {command}: {run_dir / 'traces.db'}: "), line
    missing = job.root / "nowhere"
    line = _one_line(job.cli("traces", "ls", str(missing), timeout=60), 2)
    assert f"{missing}: no such run directory" in line
    empty = job.root / "empty"
    empty.mkdir()
    line = _one_line(job.cli("traces", "show", str(empty), "0-0", timeout=60), 2)
    assert f"{empty / 'traces.db'}: no trace store here" in line
    line = _one_line(job.cli("export", str(missing), timeout=60), 2)
    assert line == f"rollgym export: {missing}: no such run directory"


def test_a_truncated_store_is_one_line_for_every_command_and_for_serve(job: Job) -> None:
    """Cut short (a copy or a disk that stopped): the SQLite header is whole, so only SQLite,
    reading the schema, finds it damaged; ``traces serve`` says so and exits with the status
    that tells a run not to restart it in vain."""
    job.root.mkdir(parents=True, exist_ok=True)
    db = job.root / "traces.db"
    TraceStore(db).close()
    db.write_bytes(db.read_bytes()[:5000])
    for command in ("ls", "check", "slowest", "profile"):
        line = _one_line(job.cli("traces", command, str(db), timeout=60), 2)
        assert line == (
            f"rollgym traces {command}: {db}: not a readable trace store "
            "(database disk image is malformed)"
        ), line
    serve = job.cli("traces", "serve", "--db", str(db), "--port", "0", timeout=60)
    line = _one_line(serve, EXIT_UNUSABLE_STORE)
    assert line == (
        f"rollgym traces serve: {db} is not a readable trace store "
        "(database disk image is malformed)"
    ), line


def test_traces_serve_on_a_port_in_use_is_one_line_naming_it(job: Job) -> None:
    job.root.mkdir(parents=True, exist_ok=True)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = job.cli(
            "traces", "serve", "--db", str(job.root / "t.db"), "--port", str(port), timeout=60
        )
    line = _one_line(proc, 2)
    assert f"cannot listen on 127.0.0.1:{port}: the port is in use" in line


def test_a_syntax_error_in_a_custom_module_is_one_line_naming_file_and_line(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    job.write({"a": agent("broken_mod:Agent")}, [{"q": 0}], agent="a")
    (job.root / "broken_mod.py").write_text("import os\nclass Agent(:\n")
    env = {**job.env(), "PYTHONPATH": f"{job.root}:{job.env()['PYTHONPATH']}"}
    proc = subprocess.run(job.command(), env=env, capture_output=True, text=True, timeout=60)
    line = _one_line(proc, 2)
    assert "servers.a.impl" in line and f"{job.root / 'broken_mod.py'}:2: " in line
    assert not Path(job.out).exists()
