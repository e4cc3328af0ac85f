"""A server's start-time checks: each broken set-up one line, naming the key at fault."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest

from rollgym.builtins.models.openai_upstream import OpenAIUpstream
from rollgym.builtins.models.simulated import SimulatedModel
from rollgym.servers.agent import Agent
from rollgym.servers.sdk_warmup import needs_sdk
from rollgym.servers.start_checks import (
    SetupProblem,
    check_setup,
    forget_problem,
    named_variables,
    read_problem,
    resolve_checked,
    write_problem,
)

AGENT_SOURCES = {
    "calls_async": "class A(Agent):\n    async def run(self, row, rollout):\n"
    "        client = rollout.async_openai()\n",
    "calls_sync": "class A(Agent):\n    def go(self, rollout):\n        return rollout.openai()\n",
    "imports_it": "import openai\n\nclass A(Agent):\n    pass\n",
    "mentions_it": 'class A(Agent):\n    """Talks to an openai-compatible server."""\n'
    '    provider = "openai"\n',
}


def _agent_from(tmp_path: Path, name: str, source: str, monkeypatch: pytest.MonkeyPatch) -> type:
    module = f"start_check_{name}"
    (tmp_path / f"{module}.py").write_text(
        "from rollgym.servers import Agent\n" + source.replace("import openai\n", ""),
        encoding="utf-8",
    )
    if "import openai" in source:  # the line is in the file, the import is not run
        text = (tmp_path / f"{module}.py").read_text()
        (tmp_path / f"{module}.py").write_text("if False:\n    import openai\n" + text)
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__(module)
    cls = sys.modules[module].A
    assert isinstance(cls, type) and issubclass(cls, Agent)
    return cls


@pytest.mark.parametrize("name", sorted(AGENT_SOURCES))
def test_a_call_or_import_of_the_sdk_is_a_need_a_mention_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    cls = _agent_from(tmp_path, name, AGENT_SOURCES[name], monkeypatch)
    assert needs_sdk(cls) is (name != "mentions_it")
    monkeypatch.setattr(cls, "uses_openai_sdk", False, raising=False)  # its own word wins
    assert not needs_sdk(cls)


def test_a_missing_sdk_is_refused_where_the_class_needs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls = _agent_from(tmp_path, "calls_async", AGENT_SOURCES["calls_async"], monkeypatch)
    options = cls.Options.model_validate({})
    check_setup("mod:A", cls, options)  # installed here: nothing to say
    monkeypatch.setitem(sys.modules, "openai", None)  # as the tests hide uvloop and httptools
    with pytest.raises(SetupProblem) as raised:
        check_setup("mod:A", cls, options)
    assert raised.value.key == "impl"
    assert "mod:A uses the OpenAI SDK" in raised.value.message
    check_setup("simulated", SimulatedModel, SimulatedModel.Options.model_validate({}))


def test_every_option_ending_in_env_names_a_variable_that_must_be_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    options = OpenAIUpstream.Options.model_validate(
        {"base_url": "http://127.0.0.1:9/v1", "model_name": "m", "api_key_env": "START_CHECK_KEY"}
    )
    assert named_variables(options) == {"api_key_env": "START_CHECK_KEY"}
    monkeypatch.delenv("START_CHECK_KEY", raising=False)
    for value in (None, ""):
        if value is not None:
            monkeypatch.setenv("START_CHECK_KEY", value)
        with pytest.raises(SetupProblem) as raised:
            check_setup("openai", OpenAIUpstream, options)
        error = raised.value.config_error("policy")
        assert str(error) == (
            "servers.policy.api_key_env: environment variable 'START_CHECK_KEY' is not set or empty"
        )
    monkeypatch.setenv("START_CHECK_KEY", "sk-test")
    check_setup("openai", OpenAIUpstream, options)


def test_an_impl_that_does_not_resolve_is_a_problem_of_impl() -> None:
    with pytest.raises(SetupProblem) as raised:
        resolve_checked("no_such_pkg.mod:Cls", "agent")
    assert raised.value.key == "impl" and "no_such_pkg.mod" in raised.value.message


def test_the_problem_travels_whole_through_a_file_and_a_pickle(tmp_path: Path) -> None:
    ready = tmp_path / "logs" / "policy.ready"
    assert read_problem(ready, "policy") is None
    problem = SetupProblem("api_key_env", "environment variable 'K' is not set or empty")
    write_problem(ready, problem)
    error = read_problem(ready, "policy")
    assert error is not None and error.key_path == "servers.policy.api_key_env"
    forget_problem(ready)
    assert read_problem(ready, "policy") is None
    copy = pickle.loads(pickle.dumps(problem))  # a Ray actor's error crosses a pickle
    assert (copy.key, copy.message) == (problem.key, problem.message)


def test_a_module_raising_at_import_is_one_line_with_its_own_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "raises_at_import.py").write_text(
        "import json\n\njson.loads('{broken\\n json')\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SetupProblem) as raised:
        resolve_checked("raises_at_import:A", "agent")
    message = raised.value.message
    assert "\n" not in message
    assert f"raised at import ({tmp_path / 'raises_at_import.py'}:3): JSONDecodeError" in message
