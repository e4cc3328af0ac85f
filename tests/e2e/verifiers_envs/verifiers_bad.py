"""verifiers environments that go wrong, each in one precise way (for the one-line tests).

- ``not_an_env``: a module attribute that is no environment; ``returns_a_dict``: a loader
  that returns something else; ``broken``: a loader that raises;
- ``load_raising``: a ``vf.MultiTurnEnv`` whose ``env_response`` raises after the first turn;
- ``load_hanging``: one whose ``setup_state`` never returns; ``load_dying``: one whose
  ``env_response`` ends the whole worker process.
"""

from __future__ import annotations

import asyncio
import os

import verifiers as vf
from datasets import Dataset

not_an_env = 3


def returns_a_dict() -> dict[str, str]:
    return {"not": "an environment"}


def broken() -> vf.Environment:
    raise RuntimeError("the dataset\nis gone")


def _dataset() -> Dataset:
    return Dataset.from_list([{"question": f"Say something #{i}", "answer": ""} for i in range(8)])


def _always(completion) -> float:
    return 1.0


class Raising(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        raise RuntimeError("the referee fell asleep")


class Hanging(vf.MultiTurnEnv):
    async def setup_state(self, state):
        await asyncio.sleep(3600)
        return state

    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": "again"}]


def load_raising() -> vf.Environment:
    return Raising(eval_dataset=_dataset(), max_turns=3, rubric=vf.Rubric(funcs=[_always]))


def load_hanging() -> vf.Environment:
    return Hanging(eval_dataset=_dataset(), max_turns=3, rubric=vf.Rubric(funcs=[_always]))


class Dying(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        os._exit(3)  # the whole process, as a segfaulting extension would


def load_dying() -> vf.Environment:
    return Dying(eval_dataset=_dataset(), max_turns=3, rubric=vf.Rubric(funcs=[_always]))
