"""``rollgym run`` and ``rollgym serve`` (the commands that take a job config): their shared
CONFIG argument, and bad input as one line on stderr with the status cli/job_command.py
names. Serving for real is tests/e2e/test_serve.py."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollgym.cli import run as run_cli
from rollgym.cli.job_command import EXIT_CONFIG, EXIT_ERROR, EXIT_INTERRUPTED
from rollgym.cli.main import build_parser, main
from rollgym.config import load_config

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "quickstart.yaml"


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_the_exit_statuses_are_the_documented_ones() -> None:
    assert (EXIT_ERROR, EXIT_CONFIG, EXIT_INTERRUPTED) == (1, 2, 130)
    assert (run_cli.EXIT_CONFIG, run_cli.EXIT_ERROR) == (EXIT_CONFIG, EXIT_ERROR)


@pytest.mark.parametrize("command", ["run", "serve"])
def test_both_commands_take_config_first(command: str) -> None:
    args = build_parser().parse_args([command, "job.yaml", "run.concurrency=4"])
    assert args.config == "job.yaml"
    rest = args.overrides if command == "run" else args.names
    assert rest == ["run.concurrency=4"]


@pytest.mark.parametrize("command", ["run", "serve"])
def test_a_missing_config_is_one_line(
    command: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "absent.yaml"
    assert main([command, str(path)]) == EXIT_CONFIG
    line = _one_line(capsys)
    assert line.startswith("rollgym: config error: ") and str(path) in line


def test_serve_names_an_unknown_server_and_the_ones_there_are(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["serve", str(EXAMPLE), "nosuch", f"run.output_dir={tmp_path / 'out'}"]
    assert main(argv) == EXIT_CONFIG
    line = _one_line(capsys)
    assert "no server named 'nosuch'" in line and "solver" in line
    assert not (tmp_path / "out").exists()


def test_serve_tells_overrides_from_server_names(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An argument with '=' is an override: a bad one is named as such, not as a server."""
    assert main(["serve", str(EXAMPLE), "solver", "run.concurrency=zero"]) == EXIT_CONFIG
    line = _one_line(capsys)
    assert "override run.concurrency=zero" in line


def test_the_resume_line_adds_the_folder_of_a_generated_run_id(tmp_path: Path) -> None:
    """Without run.output_dir (nor run.run_id) the folder is named by a generated id: the
    resume line names it, else running the same line again would start a new run."""
    (tmp_path / "rows.jsonl").write_text("")
    config_path = tmp_path / "job.yaml"
    config_path.write_text(
        f"run:\n  input: {tmp_path / 'rows.jsonl'}\n"
        "servers:\n  a: {kind: agent, url: 'http://127.0.0.1:9'}\n"
    )
    args = argparse.Namespace(config=str(config_path), overrides=["run.repeats=2"])
    generated = load_config(str(config_path), args.overrides)
    folder = tmp_path / "runs" / "abc"
    assert run_cli.resume_command(args, generated, str(folder)) == (
        f"rollgym run {config_path} run.repeats=2 run.output_dir={folder}"
    )
    args.overrides = ["run.repeats=2", f"run.output_dir={folder}"]
    named = load_config(str(config_path), args.overrides)
    assert run_cli.resume_command(args, named, str(folder)) == (
        f"rollgym run {config_path} run.repeats=2 run.output_dir={folder}"
    )


def test_an_unusable_output_dir_is_refused_before_the_driver_is_imported(tmp_path: Path) -> None:
    """The folder is checked right after the config is validated: the one-line refusal comes
    before the collector, the dispatcher and their HTTP stack are imported (a subprocess:
    this test process has imported them already)."""
    (tmp_path / "afile").write_text("not a folder")
    out = tmp_path / "afile" / "out"
    probe = (
        "import sys\n"
        "from rollgym.cli.main import main\n"
        f"code = main(['run', {str(EXAMPLE)!r}, 'run.output_dir={out}'])\n"
        "print(code, 'rollgym.driver.job' in sys.modules, 'rollgym.driver.collector' in sys.modules)\n"
    )
    env = {**os.environ, "ROLLGYM_FORK_SERVER": "0"}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.stdout.split() == ["2", "False", "False"], done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "cannot write the output directory" in done.stderr
    assert str(out) in done.stderr


def test_an_options_old_name_is_one_line_on_stderr_and_the_config_loads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from rollgym.cli.job_command import load_starting_early
    from rollgym.placement.forked import discard_early

    path = tmp_path / "job.yaml"
    upstream = (
        "  upstream: {kind: model, impl: openai, base_url: 'http://127.0.0.1:9/v1', model: m}"
    )
    path.write_text(EXAMPLE.read_text().replace("\nservers:\n", f"\nservers:\n{upstream}\n", 1))
    try:
        config = load_starting_early(str(path), [])
    finally:
        discard_early()
    assert config.servers["upstream"].validated_options().model_name == "m"  # type: ignore[attr-defined]
    line = _one_line(capsys)
    assert line == (
        f"rollgym: config: {path}: servers.upstream.model: now called 'model_name'; "
        "the old name still works"
    )
