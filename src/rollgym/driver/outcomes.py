"""What one rollout became: a result with a reward, or a failure record. A failure is data.

Both are plain frozen records so the library API can hand them to an embedder and the job can
append them to ``rollouts.jsonl`` / ``failures.jsonl`` with the same field names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rollgym.errors import ErrorKind
from rollgym.policy_versions import PolicyVersion
from rollgym.records import fields_record

#: What a ``trajectories.jsonl`` line repeats of its ``rollouts.jsonl`` line (``usage`` when
#: the rollout has one), before the trajectory itself.
TRAJECTORY_FIELDS = (
    "rollout_id",
    "task_index",
    "rollout_index",
    "attempt",
    "dispatch_name",
    "reward",
    "usage",
    "policy_versions",
    "policy_lag",
)


@dataclass(frozen=True, slots=True)
class RolloutResult:
    """A rollout whose final attempt answered a JSON object with a numeric ``reward``."""

    rollout_id: str
    task_index: int
    rollout_index: int
    attempt: int
    dispatch_name: str
    reward: float
    duration_s: float
    #: Trace of the final attempt's dispatch (32 lowercase hex), None when tracing is off.
    trace_id: str | None
    started_at: float
    finished_at: float
    #: The agent's (or environment episode's) whole answer, ``reward`` included.
    result: dict[str, Any]
    #: False when the sampler dropped that trace (``OTEL_TRACES_SAMPLER``): no backend has it.
    trace_sampled: bool = True
    #: The rollout's trajectory (docs/trajectories.md) when the run asked for one; it is taken
    #: out of ``result`` so it is stored once, in ``trajectories.jsonl``.
    trajectory: dict[str, Any] | None = None
    #: What the rollout used at the model (``input_tokens``, ``output_tokens``,
    #: ``cached_tokens`` where the engine said, ``model_calls``, ``model_s``), as its agent
    #: counted it; None when the agent called no model through rollgym.
    usage: dict[str, Any] | None = None
    #: The policy version each model call ran under, in call order (docs/policy-versions.md);
    #: None when no model server stamped one.
    policy_versions: list[PolicyVersion] | None = None
    #: The engine's own weight label per call, where the engine reports one.
    engine_versions: list[PolicyVersion] | None = None
    #: Versions the oldest call was behind the current one when the result came back.
    policy_lag: int | None = None

    def to_record(self, trajectory_at: Mapping[str, object] | None = None) -> dict[str, object]:
        """The ``rollouts.jsonl`` line; ``trajectory_at`` points at its trajectory line."""
        record = {
            "rollout_id": self.rollout_id,
            "task_index": self.task_index,
            "rollout_index": self.rollout_index,
            "attempt": self.attempt,
            "dispatch_name": self.dispatch_name,
            "reward": self.reward,
            "duration_s": self.duration_s,
            "trace_id": self.trace_id,
            "trace_sampled": self.trace_sampled,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "result": self.result,
        }
        if self.usage is not None:
            record["usage"] = self.usage
        if self.policy_versions is not None:
            record["policy_versions"] = self.policy_versions
            record["policy_lag"] = self.policy_lag
        if self.engine_versions is not None:
            record["engine_versions"] = self.engine_versions
        if trajectory_at is not None:
            record["trajectory"] = trajectory_at
        return record

    def trajectory_record(self) -> dict[str, object]:
        """The ``trajectories.jsonl`` line: the rollout's identity, reward and trajectory (the
        ``rollouts.jsonl`` line's fields of :data:`TRAJECTORY_FIELDS`, in that order)."""
        record = self.to_record()
        kept = {key: record[key] for key in TRAJECTORY_FIELDS if key in record}
        kept["trajectory"] = self.trajectory
        return kept


@dataclass(frozen=True, slots=True)
class RolloutFailure:
    """A rollout (or an input line) that produced no reward, and why.

    ``error_kind`` is one of :data:`rollgym.errors.ErrorKind` (``invalid_row``,
    ``unknown_agent``, ``unknown_route``, ``connection_error``, ``timeout``, ``http_5xx``,
    ``http_429``, ``http_4xx``, ``invalid_response``, ``missing_reward``, ``stale`` (every
    attempt ran on a policy version more than ``max_staleness`` behind), ``cancelled``).
    """

    rollout_id: str | None
    task_index: int
    rollout_index: int | None
    attempt: int
    dispatch_name: str | None
    error_kind: ErrorKind
    message: str
    line: int | None = None
    trace_id: str | None = None
    trace_sampled: bool = True
    #: Where the agent's own code raised: its innermost frames outside rollgym's package
    #: (``file:line in function``, innermost last), as the agent server answered them.
    frames: list[str] | None = None
    #: The turns the rollout recorded before it failed (a trajectory of the run's capture),
    #: when the run records trajectories; never in trajectories.jsonl (it has no reward).
    partial_trajectory: dict[str, Any] | None = None

    def to_record(self) -> dict[str, object]:
        """The ``failures.jsonl`` line: every field, in declaration order (``frames`` and
        ``partial_trajectory`` only when there are some)."""
        absent = [name for name in _ONLY_WHEN_SET if getattr(self, name) is None]
        return fields_record(self, leave_out=absent)


#: Failure fields a ``failures.jsonl`` line holds only when they are set.
_ONLY_WHEN_SET = ("frames", "partial_trajectory")


def failure_detail(body: object) -> dict[str, object] | None:
    """What a server's error body says beyond its message: ``frames`` (a list of strings) and
    ``trajectory`` (an object), each kept only in that shape; None when neither is there."""
    if not isinstance(body, dict):
        return None
    detail: dict[str, object] = {}
    frames = body.get("frames")
    if isinstance(frames, list) and all(isinstance(f, str) for f in frames):
        detail["frames"] = frames[-MAX_FRAMES:]
    trajectory = body.get("trajectory")
    if isinstance(trajectory, dict):
        detail["trajectory"] = trajectory
    return detail or None


#: Most frames a failure keeps (the innermost).
MAX_FRAMES = 8


Outcome = RolloutResult | RolloutFailure
