"""Config errors a person meets first: each one line naming the file (or the override)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollgym.config import load_config
from rollgym.errors import ConfigError

GOOD = """\
run:
  input: rows.jsonl
  agent: a
servers:
  a: {kind: agent, impl: single_turn, model: m, environment: e}
  m: {kind: model, impl: simulated}
  e: {kind: environment, impl: arithmetic}
"""


def _error(path: Path, overrides: tuple[str, ...] = ()) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(path, overrides)
    assert "\n" not in str(caught.value), "an error is one line"
    return caught.value


def test_a_duplicate_key_is_refused_naming_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        GOOD.replace("  agent: a\n", "  agent: a\n  concurrency: 3\n  concurrency: 4\n")
    )
    message = str(_error(path))
    assert message.startswith(f"{path}: line 5: duplicate key 'concurrency'"), message
    assert "first set on line 4" in message


def test_a_duplicate_key_in_a_flow_mapping_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(GOOD.replace("{kind: model, impl: simulated}", "{kind: model, kind: env}"))
    assert "duplicate key 'kind'" in str(_error(path))


def test_a_yaml_syntax_error_names_the_file_not_a_unicode_string(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("run:\n  input: rows.jsonl\n bad: [\n")
    message = str(_error(path))
    assert message.startswith(f"{path}: not valid YAML: line 3, column 2: "), message
    assert "<unicode string>" not in message


@pytest.mark.parametrize("character", ["\x00", "\x07", "\x1b", "\ufffe"])
def test_a_character_yaml_refuses_is_located_not_a_traceback(
    tmp_path: Path, character: str
) -> None:
    """PyYAML refuses a control character before it parses a token (in its loader's
    constructor): a NUL from a binary file, a bell or an escape pasted from a terminal."""
    path = tmp_path / "job.yaml"
    path.write_text(GOOD.replace("  input: rows.jsonl", f"  input: rows{character}.jsonl"))
    message = str(_error(path))
    code = f"U+{ord(character):04X}"
    assert message == (
        f"{path}: not valid YAML: line 2, column 14: character {code} is not allowed in YAML "
        "(it is not printable)"
    ), message


def test_an_override_typo_is_blamed_on_the_override(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(GOOD)
    error = _error(path, ("run.concurency=4",))
    assert str(error).startswith("override run.concurency=4: run.concurency: unknown key")
    assert "did you mean 'concurrency'" in str(error)
    assert str(path) not in str(error)
    bad_value = _error(path, ("run.concurrency=many",))
    assert str(bad_value).startswith("override run.concurrency=many: run.concurrency: ")


def test_an_error_of_the_file_stays_the_files_with_overrides_given(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(GOOD.replace("  agent: a\n", "  agent: a\n  repeets: 2\n"))
    error = _error(path, ("run.concurrency=4",))
    assert str(error).startswith(f"{path}: run.repeets: unknown key")


def test_a_syntax_error_in_a_custom_module_names_its_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_agent_mod.py").write_text("x = 1\ndef f(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "job.yaml"
    path.write_text(
        GOOD.replace("impl: single_turn, model: m, environment: e", "impl: 'broken_agent_mod:Cls'")
    )
    error = _error(path)
    assert error.key_path == "servers.a.impl"
    assert f"{tmp_path / 'broken_agent_mod.py'}:2: " in str(error)


@pytest.mark.parametrize(
    ("override", "problem"),
    [
        ("run.concurrency=[1", "expected ',' or ']', but got '<stream end>' at column 3"),
        ("run.agent=a: b: c", "mapping values are not allowed here at column 5"),
        ('run.agent="abc', "found unexpected end of stream at column 5"),
        (
            "run.agent=a\x07b",
            "character U+0007 is not allowed in YAML (it is not printable) at column 2",
        ),
    ],
)
def test_an_override_that_is_not_yaml_is_one_line_naming_it(
    tmp_path: Path, override: str, problem: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(GOOD)
    message = str(_error(path, (override,)))
    key, _, raw = override.partition("=")
    assert message == f"override {override}: {key}: the value {raw!r} is not valid YAML: {problem}"
    assert "<unicode string>" not in message


UPSTREAM = GOOD.replace(
    "  m: {kind: model, impl: simulated}\n",
    "  m: {kind: model, impl: openai, base_url: 'http://127.0.0.1:9/v1', model: served,"
    " timeout_s: 30}\n",
)


def test_an_options_old_name_still_works_and_is_said_once_per_key(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(UPSTREAM)
    with pytest.warns(FutureWarning) as said:
        config = load_config(path)
    options = config.servers["m"].validated_options()
    assert (options.model_name, options.request_timeout_s) == ("served", 30.0)  # type: ignore[attr-defined]
    assert sorted(str(w.message) for w in said) == [
        f"{path}: servers.m.model: now called 'model_name'; the old name still works",
        f"{path}: servers.m.timeout_s: now called 'request_timeout_s'; the old name still works",
    ]


def test_an_options_new_names_say_nothing(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        UPSTREAM.replace("model: served", "model_name: served").replace(
            "timeout_s: 30", "request_timeout_s: 30"
        )
    )
    options = load_config(path).servers["m"].validated_options()
    assert options.model_name == "served"  # type: ignore[attr-defined]
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]


def test_an_option_given_by_both_names_is_refused_naming_the_server(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(UPSTREAM)
    error = _error(path, ("servers.m.model_name=other",))
    assert str(error) == f"{path}: servers.m: give 'model_name' only: 'model' is its old name"


def test_a_check_of_several_options_names_the_server_without_a_trailing_dot(
    tmp_path: Path,
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(UPSTREAM)
    error = _error(path, ("servers.m.upstream=a",))
    assert str(error) == (
        f"{path}: servers.m: give exactly one of 'base_url' (a server you run) or 'upstream' "
        "(another model server of the job)"
    )


def test_a_base_url_that_is_not_http_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(UPSTREAM)
    error = _error(path, ("servers.m.base_url=gpu-box:8000/v1",))
    assert "servers.m" in str(error)
    assert "'base_url' must be an http(s) URL, got 'gpu-box:8000/v1'" in str(error)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://127.0.0.1:99999/v1", "got 'http://127.0.0.1:99999/v1': port out of range"),
        ("http://gpu-box:80a0/v1", "got 'http://gpu-box:80a0/v1': port could not be cast"),
        ("http:///v1", "got 'http:///v1': no host"),
        ("http://me:hunter2@gpu-box:0x1/v1", "got 'http://REDACTED:REDACTED@gpu-box:0x1/v1'"),
    ],
)
def test_a_url_no_request_could_reach_is_refused_naming_why(
    tmp_path: Path, url: str, said: str
) -> None:
    """Before: a port out of range passed the check, and the run waited on a health check
    that could never connect; a URL's password was printed in the error."""
    path = tmp_path / "job.yaml"
    path.write_text(UPSTREAM)
    error = _error(path, (f"servers.m.base_url={url}",))
    assert said in str(error) and "hunter2" not in str(error)


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("run.output_dir=", "run.output_dir: is empty: give a path (got '')"),
        ("run.input=", "run.input: is empty: give a path (got '')"),
        ("run.pass_threshold=nan", "run.pass_threshold: Input should be a finite number"),
        ("servers.e.pass_threshold=.inf", "servers.e.pass_threshold: Input should be a finite"),
    ],
)
def test_a_value_that_means_nothing_is_refused_naming_its_key(
    tmp_path: Path, override: str, said: str
) -> None:
    """An empty path is the config's own folder (``run.output_dir=`` wrote the run's files
    beside the config); a threshold of nan passes nothing and fails nothing."""
    path = tmp_path / "job.yaml"
    path.write_text(GOOD)
    message = str(_error(path, (override,)))
    assert message.startswith(f"override {override}: {said}"), message
