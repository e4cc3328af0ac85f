"""The simulated model plays an environment it does not know: schema-valid calls, then an answer.

Generated arguments are checked with ``jsonschema`` (an independent validator) against the
schemas they were made for; the game is checked turn by turn through ``policy.decide``, the
function the simulated model server calls.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from rollgym.builtins.models.policy import decide
from rollgym.builtins.models.schema_args import arguments_for, quoted_words

jsonschema = pytest.importorskip("jsonschema")

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {}},
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 3, "maxLength": 12},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "verbose": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "where": {
                "type": "object",
                "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                "required": ["lat", "lon"],
            },
            "mode": {"const": "fast"},
            "limit": {"type": "integer", "default": 5},
            "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 4}]},
            "optional": {"type": "string"},
        },
        "required": [
            "city",
            "unit",
            "days",
            "ratio",
            "verbose",
            "tags",
            "where",
            "mode",
            "limit",
            "note",
        ],
    },
    # what pydantic makes of a model with a nested one ($defs are not followed: anyOf/type)
    {
        "type": "object",
        "properties": {"count": {"type": ["integer", "null"], "minimum": 10}},
        "required": ["count"],
    },
]


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_arguments_are_valid_for_their_schema(schema: dict[str, Any], seed: int) -> None:
    arguments = arguments_for(schema, random.Random(seed))
    jsonschema.validate(arguments, schema)
    assert set(schema.get("required", [])) <= set(arguments)
    assert "optional" not in arguments


def test_arguments_are_deterministic_from_the_seed() -> None:
    schema = SCHEMAS[1]
    assert arguments_for(schema, random.Random(3)) == arguments_for(schema, random.Random(3))
    seeds = {str(arguments_for(schema, random.Random(s))) for s in range(20)}
    assert len(seeds) > 1  # the seed matters


def test_a_string_takes_the_word_the_prompt_quotes() -> None:
    hints = quoted_words("Look up 'Lisbon' for me, then reply \"Answer: <it>\".")
    assert hints == ["Lisbon", "Answer: <it>"]
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    assert arguments_for(schema, random.Random(0), hints) == {"city": "Lisbon"}


def _tool(name: str, **properties: Any) -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties, "required": sorted(properties)}
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


TOOLS = [_tool("lookup", city={"type": "string"}), _tool("convert", degrees={"type": "number"})]
PROMPT = [{"role": "user", "content": "What is the weather in 'Oslo'? Use the tools."}]


def _play(correct: bool, seed: int = 0) -> list[dict[str, Any]]:
    """Play the episode against tools that answer with their name and arguments."""
    messages = list(PROMPT)
    names = {t["function"]["name"] for t in TOOLS}
    for turn in range(6):
        reply = decide(messages, names, correct, random.Random(seed + turn), TOOLS)
        if reply.tool_call is None:
            messages.append({"role": "assistant", "content": reply.content})
            return messages
        name, arguments = reply.tool_call
        call_id = f"c{turn}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name}}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": f"{name} {arguments}"})
    raise AssertionError("the policy never answered")


def test_each_tool_is_called_once_in_order_then_it_answers() -> None:
    messages = _play(correct=True)
    calls = [m["tool_calls"][0]["function"]["name"] for m in messages if m.get("tool_calls")]
    assert calls == ["lookup", "convert"]
    assert messages[2]["content"] == "lookup {'city': 'Oslo'}"
    assert messages[-1]["content"].startswith("Answer: convert {'degrees': ")
    assert _play(correct=True) == messages  # deterministic


def test_a_wrong_rollout_answers_without_looking() -> None:
    assert _play(correct=False)[-1]["content"] == "Answer: I do not know"


def test_the_built_in_games_are_unchanged() -> None:
    arith = [{"role": "user", "content": "Compute: 2 + 3\nReply with 'Answer: <number>'."}]
    assert decide(arith, set(), True, random.Random(0)).content == "Answer: 5"
    # an arithmetic prompt with tools offered is still arithmetic
    assert decide(arith, {"lookup"}, True, random.Random(0), TOOLS[:1]).content == "Answer: 5"
    keychain = [{"role": "user", "content": "Start key: k-00ab\nFind the secret."}]
    read_key = _tool("read_key", key={"type": "string"})
    reply = decide(keychain, {"read_key"}, True, random.Random(0), [read_key])
    assert reply.tool_call == ("read_key", {"key": "k-00ab"})
