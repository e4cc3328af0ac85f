"""Agents written with the official OpenAI SDK, the way a user with an SDK agent writes one.

Real rollgym agents launched by the real launcher as ``impl: sdk_agents:<Class>`` (tests/e2e
is on PYTHONPATH for the driver and the servers).
"""

from __future__ import annotations

import asyncio
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


class OverlappingStreamsAgent(Agent):
    """Two streamed calls of one rollout that overlap: the second is sent while the first is
    being generated (a server may hold a stream's headers back until its first chunk), then
    each is read to its end. On llama.cpp's server with its default ``interrupt_requests``
    the second arrival ends the first stream early. The reward is 1 when both had text."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        client = rollout.async_openai()
        ask = {
            "model": "policy",
            "messages": [{"role": "user", "content": row["question"]}],
            "max_tokens": 160,  # greedy on the tiny model: seconds of generation, no early stop
            "temperature": 0,
            "stream": True,
        }
        first = asyncio.create_task(client.chat.completions.create(**ask))  # type: ignore[call-overload]
        # A pause, not an event: nothing the agent can see says that the first holds the model.
        # The proxy sends its headers with its first chunk, and after that chunk the tiny model
        # writes the other 159 tokens in about 40 ms; that first chunk comes after about
        # 1.4 s (measured on a 2-core machine), so a second call sent at 0.3 s waits for the
        # model while the first is at it, and is sent after the first (request id ".1").
        await asyncio.sleep(0.3)
        second = asyncio.create_task(client.chat.completions.create(**ask))  # type: ignore[call-overload]
        texts: list[list[str]] = [[], []]
        async for chunk in await first:
            texts[0] += [c.delta.content or "" for c in chunk.choices]
        async for chunk in await second:
            texts[1] += [c.delta.content or "" for c in chunk.choices]
        joined = ["".join(t) for t in texts]
        return {"reward": float(all(joined)), "texts": joined}


class BlockingResponsesAgent(Agent):
    """A single-turn agent on the Responses API, streamed, through the blocking SDK client in
    a thread (``rollout.openai()``), as a user with a synchronous agent writes one."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        seeded = await rollout.env.seed(task_of(row))
        client = rollout.openai()
        question = seeded["messages"][-1]["content"]

        def ask() -> str:
            events = client.responses.create(model="policy", input=question, stream=True)
            return "".join(e.delta for e in events if e.type == "response.output_text.delta")

        answer = await asyncio.to_thread(ask)
        verdict = await rollout.env.verify(answer)
        return {"reward": verdict["reward"], "answer": answer}


class ResponsesAgent(Agent):
    """A single-turn agent on the Responses API through the async SDK client, not streamed."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        seeded = await rollout.env.seed(task_of(row))
        response = await rollout.async_openai().responses.create(
            model="policy",
            input=seeded["messages"][-1]["content"],
            max_output_tokens=row.get("max_output_tokens", 16),
        )
        verdict = await rollout.env.verify(response.output_text)
        return {"reward": verdict["reward"], "response_id": response.id}


class SecondChoiceAgent(Agent):
    """Asks for two choices, goes on with the second (sent back with its null fields left
    out, ``model_dump(exclude_none=True)``), and asks once more."""

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        seeded = await rollout.env.seed(task_of(row))
        client = rollout.async_openai()
        extra = rollout.trajectory.request_fields() if rollout.trajectory is not None else {}
        messages: list[dict[str, Any]] = list(seeded["messages"])
        first = await client.chat.completions.create(
            model="policy",
            messages=messages,  # type: ignore[arg-type]
            n=2,
            temperature=1.0,
            max_tokens=row.get("max_tokens", 12),
            extra_body=extra,
        )
        used = first.choices[1].message
        messages += [used.model_dump(exclude_none=True), {"role": "user", "content": "Again."}]
        second = await client.chat.completions.create(
            model="policy",
            messages=messages,  # type: ignore[arg-type]
            max_tokens=row.get("max_tokens", 12),
            extra_body=extra,
        )
        verdict = await rollout.env.verify(second.choices[0].message.content)
        return {"reward": verdict["reward"], "used": used.content}
