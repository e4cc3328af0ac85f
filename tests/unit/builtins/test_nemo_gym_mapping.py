"""How a NeMo Gym resource server's protocol maps onto rollgym's: the pure pieces of
``impl: nemo_gym``. The whole path (real nemo-gym servers, ``rollgym run``) is tested in
``tests/e2e/test_nemo_gym_resources_servers.py``."""

from __future__ import annotations

import orjson
import pydantic
import pytest
from tool_arguments import played_arguments as _arguments

from rollgym.builtins.envs.nemo_gym import (
    NemoGymOptions,
    _chat_of,
)
from rollgym.builtins.envs.nemo_gym_host import config_dict
from rollgym.servers import ToolAnswer
from rollgym.servers.tools import INVALID_JSON, NOT_AN_OBJECT

ROW = {
    "responses_create_params": {
        "input": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "weather in sf?"},
        ],
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                "strict": True,
            }
        ],
    },
    "expected": "cold",
}


def test_the_rows_request_is_the_prompt_and_the_tools() -> None:
    chat = _chat_of(ROW)
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather in sf?"},
    ]
    tools = chat["tools"]
    assert isinstance(tools, list) and tools[0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize(
    ("task", "says"),
    [
        ({}, "'responses_create_params' must be an object"),
        ({"responses_create_params": {"input": 3}}, "'responses_create_params': input"),
    ],
)
def test_a_row_without_a_request_is_refused_naming_the_field(
    task: dict[str, object], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        _chat_of(task)


def test_arguments_the_model_got_wrong_are_told_to_it() -> None:
    assert _arguments("t", '{"city": "sf"}') == {"city": "sf"}
    assert _arguments("t", "") == {}
    bad = _arguments("t", "{city")
    assert isinstance(bad, ToolAnswer) and bad.error == INVALID_JSON
    listed = _arguments("t", "[1]")
    assert isinstance(listed, ToolAnswer) and listed.error == NOT_AN_OBJECT


@pytest.mark.parametrize(
    "where",
    [{}, {"resources_url": "http://h:1", "resources_server": "a.py"}, {"resources_url": "h:1"}],
)
def test_exactly_one_place_for_the_server(where: dict[str, str]) -> None:
    with pytest.raises(pydantic.ValidationError):
        NemoGymOptions.model_validate(where)


@pytest.mark.parametrize(
    ("target", "folder"),
    [
        ("resources_servers.example_single_tool_call.app", "example_single_tool_call"),
        ("servers/word/app.py", "word"),
    ],
)
def test_the_injected_config_is_ng_runs_shape(target: str, folder: str) -> None:
    """What NeMo Gym's launcher injects: the head server, and the server's entry under its
    name, then ``resources_servers``, then its folder, with host and port."""
    config = orjson.loads(config_dict("nemo", target, 8123, {"judge": "x", "port": 1}))
    entry = config["nemo"]["resources_servers"][folder]
    assert entry == {"entrypoint": "app.py", "judge": "x", "host": "127.0.0.1", "port": 8123}
    assert config["dry_run"] is False and set(config["head_server"]) == {"host", "port"}
