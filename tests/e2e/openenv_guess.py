"""A real OpenEnv environment, written with openenv-core as its users write one: guess a number.

``reset(seed)`` picks a secret in 0..9 (from the seed) and tells the player whether a guess
is high or low; each ``step(GuessAction)`` answers ``higher``/``lower``/``correct`` with a
reward (1.0 when correct, else 0.0) and ``done`` once correct or after 3 guesses.

``app`` is what ``server/app.py`` of an OpenEnv environment builds (``create_app``), plus one
route of this test's own, ``/test/sessions``: how many environment instances the server
created and closed, which the tests read from outside to count leaked sessions (OpenEnv makes
one instance per WebSocket session and closes it when the session ends; ``/schema`` makes
none). ``GUESS_MODE`` picks a misbehaving variant for the bad-environment tests, or
``slow_reset``: a reset that answers after two seconds (a client shut down meanwhile).
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

MODE = os.environ.get("GUESS_MODE", "ok")
MAX_GUESSES = 3
_counts = {"opened": 0, "closed": 0}
_lock = threading.Lock()


class GuessAction(Action):
    """Guess the secret number."""

    guess: int = Field(ge=0, le=9, description="Your guess, 0 to 9.")


class GuessObservation(Observation):
    feedback: str = ""
    guesses_left: int = MAX_GUESSES


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        if MODE == "refuse":
            raise RuntimeError("the guessing game is closed today")
        with _lock:
            _counts["opened"] += 1
        self._state = State()
        self._secret = 0
        self._left = MAX_GUESSES

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> GuessObservation:
        if MODE == "slow_reset":
            time.sleep(2)
        self._secret = random.Random(seed).randrange(10)
        self._left = MAX_GUESSES
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(feedback="guess a number from 0 to 9", guesses_left=self._left)

    def step(
        self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any
    ) -> GuessObservation:
        if MODE == "raise":
            raise ValueError("the referee fell asleep")
        if MODE == "hang":
            time.sleep(30)
        self._state.step_count += 1
        self._left -= 1
        if action.guess == self._secret:
            return GuessObservation(
                feedback="correct", guesses_left=self._left, reward=1.0, done=True
            )
        feedback = "higher" if action.guess < self._secret else "lower"
        return GuessObservation(
            feedback=feedback, guesses_left=self._left, reward=0.0, done=self._left == 0
        )

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        with _lock:
            _counts["closed"] += 1


app = create_app(
    GuessEnvironment, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=4096
)


@app.get("/test/sessions")
def sessions() -> dict[str, int]:
    with _lock:
        return dict(_counts)
