"""A real verifiers ``vf.ToolEnv``, written as verifiers' users write one: look up a capital.

The model is asked for the capital of a country (named in quotes) and offered one tool,
``lookup_capital(country)``; the rubric rewards a final reply naming the capital. Nothing of
rollgym in it.
"""

from __future__ import annotations

import verifiers as vf
from datasets import Dataset

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi", "Peru": "Lima"}


async def lookup_capital(country: str) -> str:
    """Look up the capital city of a country.

    Args:
        country: The country's English name, e.g. "France".
    """
    return CAPITALS.get(country, f"no capital known for {country}")


def named_capital(completion, answer) -> float:
    text = completion[-1].content if completion else ""
    return 1.0 if answer in (text or "") else 0.0


def load_environment(max_turns: int = 4) -> vf.Environment:
    rows = [
        {"question": f'What is the capital of "{country}"? Use the tool.', "answer": capital}
        for country, capital in CAPITALS.items()
    ]
    return vf.ToolEnv(
        eval_dataset=Dataset.from_list(rows),
        tools=[lookup_capital],
        max_turns=max_turns,
        rubric=vf.Rubric(funcs=[named_capital]),
    )
