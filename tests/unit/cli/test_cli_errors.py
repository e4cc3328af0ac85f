"""Bad input to the CLI: one line naming where the problem is, a non-zero exit, no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollgym.cli.main import build_parser, main


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert "Traceback" not in captured.err + captured.out
    assert len(lines) == 1, captured.err
    return lines[0]


def test_a_missing_config_names_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "nope.yaml"
    assert main(["run", str(path)]) == 2
    line = _one_line(capsys)
    assert line.startswith("rollgym: config error: ") and str(path) in line


def test_a_bad_key_names_its_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        f"run:\n  input: {tmp_path / 'rows.jsonl'}\n  concurency: 4\n"
        "servers:\n  a: {kind: agent, url: 'http://127.0.0.1:9'}\n"
    )
    assert main(["run", str(config)]) == 2
    line = _one_line(capsys)
    assert "run.concurency" in line and str(config) in line


def test_a_bad_override_names_the_override(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        f"run:\n  input: {tmp_path / 'rows.jsonl'}\n"
        "servers:\n  a: {kind: agent, url: 'http://127.0.0.1:9'}\n"
    )
    assert main(["run", str(config), "run.concurrency=zero"]) == 2
    line = _one_line(capsys)
    assert "override run.concurrency=zero" in line and "run.concurrency" in line


def test_a_missing_run_directory_is_one_line_per_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-run")
    for argv, prefix in (
        (["traces", "ls", missing], "rollgym traces ls: "),
        (["traces", "check", missing], "rollgym traces check: "),
        (["export", missing, "--format", "parquet"], "rollgym export: "),
    ):
        assert main(argv) == 2, argv
        line = _one_line(capsys)
        assert line.startswith(prefix) and missing in line, line


def test_an_unreadable_store_is_one_line_in_json_mode_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = tmp_path / "traces.db"
    store.write_bytes(b"not a sqlite file at all" * 100)
    assert main(["traces", "ls", str(store), "--json"]) == 2
    line = _one_line(capsys)
    assert line.startswith("rollgym traces ls: ") and str(store) in line
    assert capsys.readouterr().out == ""


def test_an_option_parse_error_ends_in_one_line_naming_the_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """argparse prints its usage line, then one line naming the bad option; exit 2."""
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["traces", "serve", "--port", "notaport"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("usage: rollgym traces serve")
    assert err[-1] == "rollgym traces serve: error: argument --port: invalid int value: 'notaport'"
    assert "Traceback" not in "\n".join(err)


def test_the_serve_parser_is_the_stores_own(capsys: pytest.CaptureFixture[str]) -> None:
    """``rollgym traces serve`` and ``python -m rollgym.cli.traces serve`` (how a run starts its
    store) parse alike."""
    from rollgym.cli.traces import main as store_main

    args = build_parser().parse_args(["traces", "serve", "--port", "0", "--allow-host", "h"])
    assert (args.port, args.allow_host, args.host) == (0, ["h"], "127.0.0.1")
    with pytest.raises(SystemExit) as exit_info:
        store_main(["serve", "--port", "x"])
    assert exit_info.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .endswith("argument --port: invalid int value: 'x'")
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["traces", "ls", "r", "--limit", "-1"], "argument --limit: must be at least 1, got -1"),
        (["traces", "ls", "r", "--offset", "-5"], "argument --offset: must be at least 0, got -5"),
        (["traces", "ls", "r", "--limit", "x"], "argument --limit: 'x' is not a whole number"),
        (["traces", "slowest", "r", "-n", "0"], "argument -n: must be at least 1, got 0"),
        (["traces", "profile", "r", "--bins", "0"], "argument --bins: must be at least 1, got 0"),
        (["compare", "a", "b", "--tasks", "-1"], "argument --tasks: must be at least 0, got -1"),
        (["traces", "show", "r", "0-0", "--low-p", "x"], "argument --low-p: 'x' is not a number"),
    ],
)
def test_a_count_out_of_its_range_is_refused_naming_the_option(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """Before, ``--limit -1`` listed every rollout (SQLite reads LIMIT -1 as no limit) and a
    negative ``-n`` or ``--tasks`` answered an odd page, without a word."""
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(said)


def test_ctrl_c_in_a_reading_command_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """Ctrl-C while ``rollgym compare`` reads a run: ``rollgym: interrupted``, exit 130, no
    KeyboardInterrupt traceback. The run's ``rollouts.jsonl`` is a FIFO that never ends, so the
    command is surely inside its reading when the signal comes (the writer's open succeeds
    only once the command has the file open)."""
    run = tmp_path / "run"
    run.mkdir()
    fifo = run / "rollouts.jsonl"
    os.mkfifo(fifo)
    command = [sys.executable, "-m", "rollgym", "compare", str(run), str(run)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # Ctrl-C as a terminal delivers it, even where this test runs with SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    writer = None
    try:
        deadline = time.monotonic() + 60
        while writer is None:
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: the command has not opened it yet
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
        os.write(writer, b'{"task_index": 0, "dispatch_name": "a", "reward": 1.0}\n')
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if writer is not None:
            os.close(writer)
        process.kill()
    assert process.returncode == 130
    assert err.decode().strip() == "rollgym: interrupted"
