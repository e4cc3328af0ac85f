"""How an OpenEnv environment's protocol maps onto rollgym's: the pure pieces of ``impl: openenv``.

The whole path (real OpenEnv servers, ``rollgym run``) is tested in
``tests/e2e/test_openenv_environment.py``; here, each translation on its own: what ``reset`` is
sent, the tool an action class becomes, what the model reads, which answers are off-protocol.
"""

from __future__ import annotations

import pydantic
import pytest
from tool_arguments import played_arguments as _arguments

from rollgym.builtins.envs.openenv import (
    OpenEnvOptions,
    _action_tool,
    _reset_data,
    _tool_output,
)
from rollgym.builtins.envs.openenv_wire import (
    OPEN_SESSION,
    Observation,
    OpenEnvError,
    _error,
    _observation,
    ws_url,
)
from rollgym.servers import ToolAnswer
from rollgym.servers.tools import INVALID_JSON, NOT_AN_OBJECT

GUESS_SCHEMA = {
    "title": "GuessAction",
    "description": "Guess the secret number.",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "metadata": {"type": "object", "additionalProperties": True},
        "guess": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["guess"],
}


def test_reset_gets_the_seed_the_rollout_id_and_the_tasks_reset_arguments() -> None:
    data = _reset_data({"seed": 3, "reset": {"level": "hard"}, "prompt": "p"}, "7-0")
    assert data == {"episode_id": "7-0", "seed": 3, "level": "hard"}
    assert _reset_data({}, None) == {}


@pytest.mark.parametrize("task", [{"seed": -1}, {"seed": True}, {"seed": "3"}, {"reset": [1]}])
def test_a_task_that_does_not_fit_reset_is_refused(task: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        _reset_data(task, None)


def test_an_action_class_is_one_tool_named_after_it_without_metadata() -> None:
    tool = _action_tool(GUESS_SCHEMA)
    function = tool["function"]
    assert function["name"] == "GuessAction"
    assert function["description"] == "Guess the secret number."
    assert set(function["parameters"]["properties"]) == {"guess"}
    assert function["parameters"]["required"] == ["guess"]
    assert (
        _action_tool({"title": "My Action!", "type": "object"})["function"]["name"] == "My_Action_"
    )


def test_the_models_arguments_are_taken_as_written_or_told_what_is_wrong() -> None:
    assert _arguments("GuessAction", '{"guess": 4}') == {"guess": 4}
    assert _arguments("GuessAction", None) == {}
    bad_json = _arguments("GuessAction", '{"guess": ')
    assert isinstance(bad_json, ToolAnswer) and bad_json.error == INVALID_JSON
    not_object = _arguments("GuessAction", "48116.5")
    assert isinstance(not_object, ToolAnswer) and not_object.error == NOT_AN_OBJECT


def test_the_model_reads_the_observation_or_an_mcp_tools_text() -> None:
    seen = Observation({"feedback": "higher"}, 0.0, False)
    assert _tool_output(seen, mcp=False) == '{"feedback":"higher"}'
    done = Observation({"feedback": "correct"}, 1.0, True)
    assert _tool_output(done, mcp=False).endswith("(the episode is over)")
    result = {"content": [{"type": "text", "text": "even"}], "data": "even", "is_error": False}
    assert (
        _tool_output(Observation({"tool_name": "hint", "result": result}, None, False), mcp=True)
        == "even"
    )
    failed = {"tool_name": "hint", "result": None, "error": {"message": "boom"}}
    assert _tool_output(Observation(failed, None, False), mcp=True) == "error: boom"


def test_an_observation_message_is_read_and_anything_else_is_off_protocol() -> None:
    body = {"type": "observation", "data": {"observation": {"a": 1}, "reward": True, "done": False}}
    assert _observation("step", body) == Observation({"a": 1}, 1.0, False)
    for bad in (
        {"type": "state", "data": {}},
        {"type": "observation", "data": {"observation": [], "done": False}},
        {"type": "observation", "data": {"observation": {}, "reward": "1", "done": False}},
    ):
        with pytest.raises(OpenEnvError, match="^step: "):
            _observation("step", bad)


def test_openenvs_error_codes_become_one_line_each() -> None:
    invalid = _error(
        "step",
        {
            "code": "VALIDATION_ERROR",
            "errors": [{"loc": ["guess"], "msg": "Input should be a valid integer"}],
        },
    )
    assert (
        invalid.model_mistake
        and str(invalid) == "step: the action does not fit: guess: Input should be a valid integer"
    )
    factory = _error("reset", {"code": "FACTORY_ERROR", "message": "factory 'X' failed"})
    assert factory.step == OPEN_SESSION and not factory.model_mistake
    full = _error("reset", {"code": "CAPACITY_REACHED", "active_sessions": 4, "max_sessions": 4})
    assert full.status == 503 and "4 of 4 sessions" in str(full)
    raised = _error("step", {"code": "EXECUTION_ERROR", "message": "boom\nline two"})
    assert str(raised) == "step: the environment failed (EXECUTION_ERROR): boom line two"


def test_the_session_endpoint_of_a_base_url() -> None:
    assert ws_url("http://127.0.0.1:8000/") == "ws://127.0.0.1:8000/ws"
    assert ws_url("https://env.example") == "wss://env.example/ws"


@pytest.mark.parametrize(
    "options",
    [{}, {"openenv_url": "http://a:1", "openenv_app": "m:app"}, {"openenv_url": "ftp://a"}],
)
def test_the_options_name_exactly_one_place_for_the_environment(options: dict[str, str]) -> None:
    with pytest.raises(pydantic.ValidationError):
        OpenEnvOptions.model_validate(options)
