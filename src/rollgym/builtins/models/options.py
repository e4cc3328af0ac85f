"""The simulated model's options, apart from the model server: the driver validates a config
against them without importing the server stack (the registry names them)."""

from __future__ import annotations

import math
import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rollgym.servers import ServerOptions


class Latency(BaseModel):
    """How long one generation takes: ``fixed`` (seconds), ``uniform`` (low..high) or
    ``lognormal`` (median seconds, sigma)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["fixed", "uniform", "lognormal"] = "lognormal"
    seconds: float = Field(0.02, ge=0, description="fixed: the value; lognormal: the median.")
    low: float = Field(0.0, ge=0, description="uniform: the lower bound.")
    high: float = Field(0.05, ge=0, description="uniform: the upper bound.")
    sigma: float = Field(0.5, ge=0, description="lognormal: spread of log(latency).")

    def sample(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            return self.seconds
        if self.kind == "uniform":
            return rng.uniform(self.low, max(self.low, self.high))
        if self.seconds <= 0:
            return 0.0
        return rng.lognormvariate(math.log(self.seconds), self.sigma)


class SimulatedOptions(ServerOptions):
    accuracy: float = Field(
        0.8, ge=0, le=1, description="Probability that a rollout is played correctly."
    )
    latency: Latency = Field(default_factory=Latency)
    tool_argument_mistakes: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Probability that a tool call's arguments are JSON that is not an object "
        "('true', a number), as vLLM's forced tool calls were seen to write with a weak model; "
        "the environment answers it to the model as a tool error.",
    )
    model_name: str = Field("rollgym-simulated", description="The 'model' of answers and spans.")
    max_concurrent: int | None = Field(
        None,
        ge=1,
        description="Generations at once, like an engine's batch slots; others queue. "
        "None: no limit.",
    )
    prefill_share: float = Field(
        0.25, ge=0, le=1, description="Share of the latency before the first token."
    )
    bump_every: int | None = Field(
        None,
        ge=1,
        description="Play a trainer: raise the served policy version by one every N requests "
        "(counted on arrival). None: the version only changes when the driver sets it.",
    )
    bump_at: list[int] = Field(
        default_factory=list,
        description="Play a trainer: raise the served policy version by one as request number "
        "k (0-based, on arrival) arrives, for each k listed.",
    )
