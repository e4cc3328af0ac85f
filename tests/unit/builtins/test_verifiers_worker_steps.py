"""The verifiers worker reports every tool call a ToolEnv answers, parsed or not.

verifiers' ``ToolEnv.env_response`` parses each call's arguments with ``json.loads`` and, when
they do not parse (a real model's cut-off or control-character JSON), tells the model the
error without calling ``call_tool``. ``ToolShaped`` below follows that code (verifiers itself
lives in a Python of its own and is not importable here; the end-to-end test
``test_real_engine_foreign_envs.py`` runs the real one against llama.cpp).
"""

from __future__ import annotations

import asyncio
import io
import json
from types import SimpleNamespace
from typing import Any

from rollgym.builtins.envs.verifiers_worker import CURRENT, TOOL, Channel, Worker


class ToolShaped:
    """verifiers' legacy ``ToolEnv.env_response`` / ``call_tool``, on plain dicts."""

    async def call_tool(self, tool_name: str, tool_args: dict[str, Any], tool_call_id: str) -> Any:
        return {
            "role": "tool",
            "content": f"capital of {tool_args['country']}",
            "tool_call_id": tool_call_id,
        }

    async def env_response(self, messages: list[Any], state: Any, **kwargs: Any) -> list[Any]:
        answers = []
        for call in messages[-1]["tool_calls"]:
            try:
                args = json.loads(call["arguments"])
            except Exception as exc:
                answers.append({"role": "tool", "content": f"{exc}", "tool_call_id": call["id"]})
                continue
            answers.append(await self.call_tool(call["name"], args, call["id"]))
        return answers


def _events(env: ToolShaped, messages: list[Any]) -> tuple[list[dict[str, Any]], list[Any]]:
    out = io.StringIO()
    Worker(env, SimpleNamespace(ToolEnv=ToolShaped), Channel(out))  # wraps env's steps in place

    async def play() -> list[Any]:
        CURRENT.set(7)
        return await env.env_response(messages, {})

    answer = asyncio.run(play())
    return [json.loads(line) for line in out.getvalue().splitlines()], answer


def test_a_call_whose_arguments_do_not_parse_is_reported_as_a_mistaken_tool_step() -> None:
    calls = [
        {"id": "c1", "name": "lookup_capital", "arguments": '{"country": "France"}'},
        {"id": "c2", "name": "lookup_capital", "arguments": '{"country": "\x01Fr'},
    ]
    events, answer = _events(ToolShaped(), [{"role": "assistant", "tool_calls": calls}])
    begins = [e for e in events if e["op"] == "begin"]
    ends = {e["step"]: e for e in events if e["op"] == "end"}
    assert [(b["kind"], b["name"], b["call_id"]) for b in begins] == [
        (TOOL, "lookup_capital", "c1"),
        (TOOL, "lookup_capital", "c2"),
    ]
    reached, parsed_not = (ends[b["step"]] for b in begins)
    assert reached["output"] == "capital of France" and "error" not in reached
    # what verifiers told the model, and the model's own text as it wrote it
    assert (
        parsed_not["error"] == answer[1]["content"] and "control character" in parsed_not["error"]
    )
    assert parsed_not["arguments"] == calls[1]["arguments"]
    assert all(e["id"] == 7 for e in events)


def test_calls_that_all_reach_the_tool_are_reported_once() -> None:
    calls = [{"id": "c1", "name": "lookup_capital", "arguments": '{"country": "Peru"}'}]
    events, _ = _events(ToolShaped(), [{"role": "assistant", "tool_calls": calls}])
    assert [e["op"] for e in events] == ["begin", "end"]
