"""A real verifiers environment, written as verifiers' users write one: single-turn sums.

``load_environment(n=...)`` builds a ``vf.SingleTurnEnv`` over a dataset of ``n`` questions
("Compute: 3 + 4") with the answer, scored by a ``vf.Rubric``: ``correct`` (weight 1: the
reply's number is the answer) and ``replied`` (a metric of weight 0), its replies held to 64 tokens (its own sampling
arguments). Nothing of rollgym in it.
"""

from __future__ import annotations

import re

import verifiers as vf
from datasets import Dataset


def correct(completion, answer) -> float:
    text = completion[-1].content if completion else ""
    numbers = re.findall(r"-?\d+", text or "")
    return 1.0 if numbers and numbers[-1] == answer else 0.0


def replied(completion) -> float:
    return 1.0 if completion and completion[-1].content else 0.0


def load_environment(n: int = 50, system_prompt: str | None = None) -> vf.Environment:
    rows = [
        {"question": f"Compute: {i} + {i % 7 + 2}", "answer": str(i + i % 7 + 2)} for i in range(n)
    ]
    rubric = vf.Rubric(funcs=[correct, replied], weights=[1.0, 0.0])
    return vf.SingleTurnEnv(
        eval_dataset=Dataset.from_list(rows),
        system_prompt=system_prompt,
        rubric=rubric,
        sampling_args={"max_tokens": 64},
    )
