"""A guessing game written with openreward (ORS), as its users write one: nothing of rollgym.

The tests serve it with openreward's own ``Server`` (``python ors_guess.py <port>``, what
``Server([Guess]).run()`` does) or name ``ors_guess:Guess`` for rollgym to serve. Each
environment instance (one per ORS session) appends a line to the file ``ORS_SESSIONS`` names
when it is created and when it is torn down, so a test counts from outside the sessions the
server opened and closed. ``GUESS_MODE`` makes it misbehave for the bad-environment tests:
``raise`` (the tool raises), ``hang`` (the tool never answers), ``refuse`` (setup() raises),
``slow_create`` (each instance takes 2 s to make, as a dataset load would).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from openreward.environments import (
    Environment,
    JSONObject,
    Server,
    TextBlock,
    ToolOutput,
    terminal,
    tool,
)
from pydantic import BaseModel

MODE = os.environ.get("GUESS_MODE", "ok")
TASKS = [{"id": f"train-{i}", "secret": i % 4} for i in range(2000)]


def _count(what: str) -> None:
    path = os.environ.get("ORS_SESSIONS")
    if path:
        with open(path, "a") as out:  # one short line per write: appends do not interleave
            out.write(what + "\n")


class GuessParams(BaseModel):
    number: int


class Game(Environment):
    """A number from 0 to 3 to find: the tasks, the prompt, the sessions counted."""

    def __init__(self, task_spec: JSONObject, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec)
        self.secret = int(task_spec["secret"])  # type: ignore[arg-type]
        _count("opened")
        if MODE == "slow_create":
            time.sleep(2.0)  # openreward runs the constructor in a thread: /create answers late

    def setup(self) -> None:
        if MODE == "refuse":
            raise RuntimeError("the board is missing")

    def teardown(self) -> None:
        _count("closed")

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[JSONObject]:
        return TASKS

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="I think of a number from 0 to 3. Which is it?")]


class Guess(Game):
    """Guess the number in one try, with a tool."""

    @tool
    async def guess(self, params: GuessParams) -> ToolOutput:
        """Guess the number; the episode ends with the guess."""
        if MODE == "raise":
            raise RuntimeError("the referee fell asleep")
        if MODE == "hang":
            await asyncio.sleep(3600)
        right = params.number == self.secret
        return ToolOutput(
            blocks=[TextBlock(text="right!" if right else f"wrong, it was {self.secret}")],
            reward=1.0 if right else 0.0,
            finished=True,
        )


class Answer(BaseModel):
    answer: str


class GuessByAnswer(Game):
    """The same game answered in plain words: its one tool is ``@terminal``, hidden from the
    model, and the harness hands it the model's final answer."""

    @terminal
    @tool
    async def submit(self, params: Answer) -> ToolOutput:
        """Your final answer: the number."""
        right = params.answer.strip() == str(self.secret)
        return ToolOutput(
            blocks=[TextBlock(text="right!" if right else "wrong")],
            reward=1.0 if right else 0.0,
            finished=True,
            metadata={"answer": params.answer[:40]},
        )


if __name__ == "__main__":
    Server([Guess]).run(host="127.0.0.1", port=int(sys.argv[1]))
