"""What a server that plays rollouts (an agent, an environment's episode ``/run``) sends with
each model call: sampling parameters and the trajectory it records.

Sampling parameters come from the server's ``sampling`` option, overridden key by key by the
row's ``sampling`` object, and reach every model call of the rollout unchanged: the engine
validates their values. The keys are the generation parameters of OpenAI's API and of vLLM's
(:data:`SAMPLING_KEYS`, names as vLLM's ``ChatCompletionRequest`` spells them); anything else
an engine accepts goes under ``extra_body``, whose keys are merged into the request body as the
``openai`` SDK merges its ``extra_body``. A key outside both is refused, so a typo is said
rather than silently ignored (vLLM ignores a field it does not know).

Refused: ``n`` (a group of samples of one task is ``run.repeats`` rollouts, each its own
trajectory and reward, not several choices of one call), and, under ``extra_body`` too, the
fields rollgym itself sets for the rollout's record (:data:`ROLLGYM_FIELDS`).
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

#: The sampling parameters a rollout may set, by name (OpenAI's, then vLLM's own).
SAMPLING_KEYS = frozenset(
    (
        # OpenAI's chat completions API
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "seed",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "response_format",
        "reasoning_effort",
        "tool_choice",
        "parallel_tool_calls",
        # vLLM's sampling and chat-template parameters (its ChatCompletionRequest)
        "top_k",
        "min_p",
        "repetition_penalty",
        "length_penalty",
        "min_tokens",
        "ignore_eos",
        "stop_token_ids",
        "include_stop_str_in_output",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "bad_words",
        "allowed_token_ids",
        "truncate_prompt_tokens",
        "structured_outputs",
        "thinking_token_budget",
        "chat_template_kwargs",
    )
)
#: Where any other body field an engine accepts goes: merged into the request body.
EXTRA_BODY = "extra_body"
#: Request fields rollgym sets for the rollout itself (the conversation, the model, the answer
#: as one JSON object, one choice, the engine's request id that names the rollout): a sampling
#: object cannot set them, under ``extra_body`` either.
ROLLGYM_FIELDS = frozenset(
    ("model", "messages", "tools", "stream", "stream_options", "n", "request_id")
)


def _problem(sampling: object) -> str | None:
    """What is wrong with a sampling object, naming the key; None when it is fine."""
    if not isinstance(sampling, Mapping):
        return f"must be an object of sampling parameters, got {_json_type(sampling)}"
    for key in sampling:
        if key == "n":
            return "'n' is not supported: sample a group with run.repeats (one rollout each)"
        if key == EXTRA_BODY:
            problem = _extra_body_problem(sampling[key])
            if problem is not None:
                return problem
        elif key not in SAMPLING_KEYS:
            return (
                f"unknown sampling parameter {key!r} (known: {sorted(SAMPLING_KEYS)}; put "
                f"another field the engine accepts under {EXTRA_BODY!r})"
            )
    return None


def _extra_body_problem(extra: object) -> str | None:
    if not isinstance(extra, Mapping):
        return f"{EXTRA_BODY!r} must be an object of request fields, got {_json_type(extra)}"
    for key in extra:
        if key in ROLLGYM_FIELDS:
            return f"{EXTRA_BODY!r}: {key!r} is set by rollgym for the rollout, not by sampling"
    return None


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null" if value is None else type(value).__name__


def request_fields(sampling: Mapping[str, Any]) -> dict[str, Any]:
    """A (valid) sampling object as the request body fields it stands for: ``extra_body``'s
    keys merged in at the top, over a named key of the same name (as the SDK does)."""
    extra = sampling.get(EXTRA_BODY)
    fields = {key: value for key, value in sampling.items() if key != EXTRA_BODY}
    if isinstance(extra, Mapping):
        fields.update(extra)
    return fields


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
        """The request fields of this server's sampling merged with a row's (the row's win
        key by key, ``extra_body``'s keys among them); a bad row value is the row's fault."""
        own = request_fields(self.sampling)
        if row_sampling is None:
            return own
        problem = _problem(row_sampling)
        if problem is not None:
            raise ServerCallError(
                f"row field 'sampling' {problem}", field="row.sampling", bad_input=True
            )
        return {**own, **request_fields(row_sampling)}

    def recorder_for(self, requested: str | None) -> TrajectoryRecorder | None:
        """A fresh recorder when this rollout records a trajectory, else None (nothing kept)."""
        capture: Capture = capture_mode(requested, self.trajectories, self.capture_tokens)
        if capture == "off":
            return None
        return TrajectoryRecorder(capture, tool_output_max_bytes=self.tool_output_max_bytes)
