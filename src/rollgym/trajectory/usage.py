"""What one rollout used: tokens (cached ones where the engine says), model calls, seconds
waited on the model, the engine's own seconds and the sandbox's. Always on, unlike the
trajectory: it is a few numbers, and it never depends on whether tracing is on.

The engine and sandbox seconds are measured in other processes: the model server and the
environment server report them in ``Server-Timing`` (:mod:`rollgym.server_timing`), the
process's HTTP client adds them to the scope open around the rollout (:attr:`UsageTally.timings`),
and an environment's own episode adds its sandbox execs to the same scope directly.

Why here, beside the trajectory recorder: both watch the same model-call boundary (every
chat completion a rollout's context or SDK client sees), and the driver takes both out of the
answer the same way (:data:`USAGE_KEY`, like the trajectory's key), so ``result`` in
``rollouts.jsonl`` stays what the agent returned and ``usage`` sits beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rollgym.policy_versions import ANSWER_KEY, ENGINE_KEY, PolicyVersion, is_version
from rollgym.server_timing import ENGINE, SANDBOX, Timings
from rollgym.trajectory.completeness import incomplete_reason

#: The key the usage travels under in a rollout's answer; the driver removes it.
USAGE_KEY = "rollgym_usage"


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class UsageTally:
    """Sums over one rollout's model calls (OpenAI ``usage`` fields, engine-neutral names)."""

    __slots__ = (
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "model_calls",
        "model_s",
        "incomplete_calls",
        "policy_versions",
        "engine_versions",
        "timings",
    )

    def __init__(self) -> None:
        self.input_tokens = 0
        self.output_tokens = 0
        #: None until an answer says how many prompt tokens came from the engine's cache.
        self.cached_tokens: int | None = None
        self.model_calls = 0
        self.model_s = 0.0
        #: Model calls whose answer was not whole (cut stream, no finish reason, usage that
        #: disagrees with the tokens): see ``trajectory.completeness``.
        self.incomplete_calls = 0
        #: The policy version each model call ran under, in call order (a call whose model
        #: server stamped none is left out); the driver's staleness check reads these.
        self.policy_versions: list[PolicyVersion] = []
        #: The engine's own weight label per call, where the engine reports one.
        self.engine_versions: list[PolicyVersion] = []
        #: Seconds servers reported for this rollout (``engine``, ``sandbox``): the scope
        #: the agent or episode opens around the rollout with ``server_timing.collecting``.
        self.timings = Timings()

    def add(self, answer: Mapping[str, object], seconds: float | None = None) -> None:
        """One chat completion ``answer``; ``seconds``: how long the call took, when timed."""
        self.model_calls += 1
        if seconds is not None and seconds > 0:
            self.model_s += seconds
        if incomplete_reason(answer) is not None:
            self.incomplete_calls += 1
        version = answer.get(ANSWER_KEY)
        if is_version(version):
            self.policy_versions.append(version)
        engine = answer.get(ENGINE_KEY)
        if is_version(engine):
            self.engine_versions.append(engine)
        usage = answer.get("usage")
        if not isinstance(usage, Mapping):
            return
        self.input_tokens += _count(usage.get("prompt_tokens")) or 0
        self.output_tokens += _count(usage.get("completion_tokens")) or 0
        details = usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else None
        if cached is not None:
            self.cached_tokens = (self.cached_tokens or 0) + cached

    def to_json(self) -> dict[str, Any]:
        data: dict[str, object] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "model_calls": self.model_calls,
            "model_s": round(self.model_s, 6),
        }
        if self.cached_tokens is not None:
            data["cached_tokens"] = self.cached_tokens
        if self.incomplete_calls:
            data["incomplete_calls"] = self.incomplete_calls
        for name, key in ((ENGINE, "engine_s"), (SANDBOX, "sandbox_s")):
            seconds = self.timings.get(name)
            if seconds is not None:
                data[key] = round(seconds, 6)
        if self.policy_versions:
            data["policy_versions"] = self.policy_versions
        if self.engine_versions:
            data["engine_versions"] = self.engine_versions
        return data


def attach_usage(answer: object, tally: UsageTally | None) -> Any:
    """Put the tally into a rollout's answer (left alone when the answer is not an object, or
    nothing was counted: no model call, no reported seconds)."""
    counted = tally is not None and (tally.model_calls or tally.timings.seconds)
    if tally is not None and counted and isinstance(answer, dict):
        answer[USAGE_KEY] = tally.to_json()
    return answer


def take_usage(result: dict[str, Any]) -> dict[str, object] | None:
    """Remove and return the usage an answer carries (None when it carries none)."""
    usage = result.get(USAGE_KEY)
    if not isinstance(usage, dict):
        return None
    del result[USAGE_KEY]
    return usage
