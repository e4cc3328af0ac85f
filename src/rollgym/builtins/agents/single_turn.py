"""The single-turn agent: seed a session, ask the model once, verify its text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from rollgym.builtins.agents.options import SingleTurnOptions
from rollgym.servers import Agent, RolloutContext, ServerOptions, first_message, task_of


class SingleTurnAgent(Agent):
    """One model call per rollout; the reward is whatever the environment's verify says."""

    Options: ClassVar[type[ServerOptions]] = SingleTurnOptions
    options: SingleTurnOptions

    async def run(self, row: Mapping[str, object], rollout: RolloutContext) -> dict[str, Any]:
        seeded = await rollout.env.seed(task_of(row))
        completion = await rollout.chat(list(seeded.get("messages") or []))
        answer = first_message(completion).get("content")
        verdict = await rollout.env.verify(answer)
        return {
            "reward": verdict.get("reward"),
            "details": verdict.get("details", {}),
            "answer": answer,
        }
