"""What a server that plays rollouts (an agent, an environment's episode ``/run``) sends with
each model call: sampling parameters and the trajectory it records.

Sampling parameters come from the server's ``sampling`` option, overridden key by key by the
row's ``sampling`` object, and reach every model call of the rollout. ``n`` is refused: a
group of samples of one task is ``run.repeats`` rollouts (each its own trajectory and reward),
not several choices of one call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator

from rollgym.errors import ServerCallError
from rollgym.server_options import ServerOptions
from rollgym.trajectory.record import (
    TOOL_OUTPUT_MAX_BYTES,
    Capture,
    TrajectoryRecorder,
    capture_mode,
)

#: The sampling parameters a rollout may set (OpenAI's and vLLM's names).
SAMPLING_KEYS = frozenset(
    (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "max_tokens",
        "max_completion_tokens",
        "seed",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "logprobs",
        "top_logprobs",
        "tool_choice",
        "parallel_tool_calls",
    )
)


def _problem(sampling: object) -> str | None:
    """What is wrong with a sampling object, naming the key; None when it is fine."""
    if not isinstance(sampling, Mapping):
        return f"must be an object of sampling parameters, got {type(sampling).__name__}"
    for key in sampling:
        if key == "n":
            return "'n' is not supported: sample a group with run.repeats (one rollout each)"
        if key not in SAMPLING_KEYS:
            return f"unknown sampling parameter {key!r} (known: {sorted(SAMPLING_KEYS)})"
    return None


class RolloutOptions(ServerOptions):
    """Options of every server that plays rollouts."""

    sampling: dict[str, Any] = Field(
        default_factory=dict,
        description="Sampling parameters of every model call; a row's 'sampling' overrides.",
    )
    trajectories: bool | None = Field(
        None, description="Record each rollout's trajectory; None: as run.trajectories says."
    )
    capture_tokens: bool | None = Field(
        None,
        description="Record token ids and log-probabilities; None: as run.capture_tokens says.",
    )
    tool_output_max_bytes: int = Field(
        TOOL_OUTPUT_MAX_BYTES,
        ge=1,
        description="Most UTF-8 bytes a trajectory keeps of one tool output or message text; "
        "longer ones are cut and marked 'truncated'.",
    )

    @field_validator("sampling")
    @classmethod
    def _known_sampling(cls, value: dict[str, Any]) -> dict[str, Any]:
        problem = _problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    def sampling_for(self, row_sampling: Any) -> dict[str, object]:
        """This server's sampling merged with a row's; a bad row value is the row's fault."""
        if row_sampling is None:
            return self.sampling
        problem = _problem(row_sampling)
        if problem is not None:
            raise ServerCallError(
                f"row field 'sampling' {problem}", field="row.sampling", bad_input=True
            )
        return {**self.sampling, **row_sampling}

    def recorder_for(self, requested: str | None) -> TrajectoryRecorder | None:
        """A fresh recorder when this rollout records a trajectory, else None (nothing kept)."""
        capture: Capture = capture_mode(requested, self.trajectories, self.capture_tokens)
        if capture == "off":
            return None
        return TrajectoryRecorder(capture, tool_output_max_bytes=self.tool_output_max_bytes)
