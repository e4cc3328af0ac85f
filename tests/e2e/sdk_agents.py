"""Agents written with the official OpenAI SDK, the way a user with an SDK agent writes one.

Real rollgym agents launched by the real launcher as ``impl: sdk_agents:<Class>`` (tests/e2e
is on PYTHONPATH for the driver and the servers).
"""

from __future__ import annotations

from typing import Any

from rollgym.servers.agent import Agent, task_of
from rollgym.servers.rollout_context import RolloutContext

MAX_TURNS = 8


class StreamingToolAgent(Agent):
    """A multi-turn tool loop that reads every answer as a stream (``stream=True`` with
    ``stream_options.include_usage``) through its rollout's ``async_openai()`` client, and
    joins the chunks itself, as an SDK user does. It asks for token ids through
    ``extra_body`` when the rollout records tokens, and passes the row's ``sampling``."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        seeded = await rollout.env.seed(task_of(row))
        messages: list[dict[str, Any]] = list(seeded["messages"])
        tools = seeded.get("tools")
        client = rollout.async_openai()
        extra = rollout.trajectory.request_fields() if rollout.trajectory is not None else {}
        extra = {**extra, **(row.get("sampling") or {})}
        answer: str | None = None
        for _ in range(MAX_TURNS):
            stream = await client.chat.completions.create(
                model="policy",
                messages=messages,  # type: ignore[arg-type]
                tools=tools,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=extra,
            )
            text: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            async for chunk in stream:
                for choice in chunk.choices:
                    text.append(choice.delta.content or "")
                    for call in choice.delta.tool_calls or []:
                        joined = calls.setdefault(
                            call.index, {"id": call.id, "type": "function", "function": {}}
                        )
                        function = call.function
                        if function is not None and function.name:
                            joined["function"]["name"] = function.name
                        if function is not None and function.arguments:
                            arguments = joined["function"].get("arguments", "")
                            joined["function"]["arguments"] = arguments + function.arguments
            message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
            if calls:
                message["tool_calls"] = [calls[i] for i in sorted(calls)]
            messages.append(message)
            if not calls:
                answer = message["content"]
                break
            for call in message["tool_calls"]:
                function = call["function"]
                # the call as the model wrote it: a mistake in it is told to the model
                told = await rollout.env.call_model_tool(
                    function.get("name", ""), function.get("arguments")
                )
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": told.output}
                )
        verdict = await rollout.env.verify(answer)
        return {"reward": verdict["reward"], "answer": answer}
