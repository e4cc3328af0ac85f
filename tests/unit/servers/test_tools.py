"""@tool: schemas and validation from a signature or an explicit model."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from rollgym.servers.tools import ToolArgumentsError, tool, tools_of


class Move(BaseModel):
    x: int = Field(ge=0)
    y: int = 0


class Board:
    @tool
    async def shout(self, state: list, text: str, times: int = 1) -> str:
        """Upper-case a text.

        Long details that are not part of the description."""
        state.append(text)
        return text.upper() * times

    @tool(name="move", description="Move a piece.", args=Move)
    async def do_move(self, state: list, args: Move) -> dict:
        return {"at": [args.x, args.y]}


def test_schema_from_signature():
    spec = tools_of(Board)["shout"]
    schema = spec.openai_schema()
    assert schema["function"]["description"] == "Upper-case a text."
    params = schema["function"]["parameters"]
    assert params["required"] == ["text"]
    assert params["properties"]["times"]["type"] == "integer"
    assert params["additionalProperties"] is False


async def test_invoke_with_keywords_and_with_model():
    tools = tools_of(Board)
    state: list = []
    assert (
        await tools["shout"].invoke(
            Board(), state, tools["shout"].parse({"text": "hi", "times": 2})
        )
        == "HIHI"
    )
    assert state == ["hi"]
    assert (
        await tools["move"].invoke(Board(), state, tools["move"].parse({"x": 2})) == '{"at":[2,0]}'
    )


def test_bad_arguments_name_the_field():
    tools = tools_of(Board)
    with pytest.raises(ToolArgumentsError) as info:
        tools["move"].parse({"x": -1})
    assert info.value.field == "arguments.x"
    with pytest.raises(ToolArgumentsError) as info:
        tools["shout"].parse({"text": "a", "loud": True})
    assert info.value.field == "arguments.loud"


def test_sync_function_is_refused():
    with pytest.raises(TypeError, match="async def"):

        @tool
        def nope(self, state, x: int) -> str:  # type: ignore[misc]
            return ""
