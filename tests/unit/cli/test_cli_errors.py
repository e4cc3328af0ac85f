"""Bad input to the CLI: one line naming where the problem is, a non-zero exit, no traceback."""

from __future__ import annotations

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
