"""A real ``vf.MultiTurnEnv``, written as verifiers' users write one: a chain of sums.

The model is asked a sum; each ``env_response`` checks the last answer and asks the next sum,
built on it, until ``rounds`` sums were answered (then ``final_env_response`` ends the episode).
The rubric rewards the share of sums answered right. Nothing of rollgym in it.
"""

from __future__ import annotations

import re

import verifiers as vf
from datasets import Dataset


def _number(text: str | None) -> int | None:
    found = re.findall(r"-?\d+", text or "")
    return int(found[-1]) if found else None


class SumChain(vf.MultiTurnEnv):
    def __init__(self, rounds: int, **kwargs):
        super().__init__(max_turns=rounds + 1, **kwargs)
        self.rounds = rounds

    async def setup_state(self, state):
        state["expected"] = [int(state["answer"])]
        state["right"] = 0
        return state

    async def env_response(self, messages, state, **kwargs):
        said = _number(messages[-1].content)
        if said == state["expected"][-1]:
            state["right"] += 1
        if len(state["expected"]) >= self.rounds:
            state["final_env_response"] = [{"role": "user", "content": "Done."}]
            return state["final_env_response"]
        step = len(state["expected"]) + 1
        state["expected"].append(state["expected"][-1] + step)
        return [{"role": "user", "content": f"Compute: {state['expected'][-2]} + {step}"}]


def share_right(state) -> float:
    return state["right"] / len(state["expected"])


def load_environment(rounds: int = 3) -> vf.Environment:
    rows = [{"question": f"Compute: {i} + 1", "answer": str(i + 1)} for i in range(10)]
    return SumChain(
        rounds, eval_dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[share_right])
    )
