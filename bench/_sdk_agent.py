"""The agent of ``bench/sdk_agents.py``: the documented SDK agent (docs/writing-an-agent.md).

It does what the built-in ``single_turn`` agent does (seed, model calls, verify), with the
official OpenAI SDK making the model calls through ``rollout.async_openai()``; ``calls`` (an
option) is how many model calls it makes, the last one's answer being verified.
"""

from __future__ import annotations

from typing import Any

from rollgym.servers import Agent, AgentOptions, RolloutContext, task_of


class SdkOptions(AgentOptions):
    calls: int = 1


class SdkSolver(Agent):
    Options = SdkOptions
    options: SdkOptions

    async def run(self, row: dict[str, Any], rollout: RolloutContext) -> dict[str, Any]:
        options = self.options
        seeded = await rollout.env.seed(task_of(row))
        client = rollout.async_openai()
        answer = None
        for _ in range(options.calls):
            completion = await client.chat.completions.create(
                model="policy", messages=seeded["messages"], max_tokens=64
            )
            answer = completion.choices[0].message.content
        verdict = await rollout.env.verify(answer)
        return {"reward": verdict["reward"]}
