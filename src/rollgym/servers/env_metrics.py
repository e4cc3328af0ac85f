"""An environment's own running aggregates, answered by ``POST /aggregate_metrics``.

Kept on the environment instance (never module globals), updated in O(1) per call, so the
driver's one aggregate call at the end of a run costs the same for ten rollouts or a million.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rollgym.defaults import PASS_THRESHOLD


@dataclass
class EnvAggregates:
    """Counts of verifications, rewards, passes and tool calls since the server started."""

    pass_threshold: float = PASS_THRESHOLD
    verified: int = 0
    reward_sum: float = 0.0
    passed: int = 0
    seeded: int = 0
    tool_calls: Counter[str] = field(default_factory=Counter)
    tool_errors: int = 0
    #: Tool calls a model got wrong (told to the model, not counted by name: a model may
    #: invent any number of tool names).
    tool_mistakes: int = 0

    def record_seed(self) -> None:
        self.seeded += 1

    def record_tool(self, name: str, *, ok: bool) -> None:
        self.tool_calls[name] += 1
        if not ok:
            self.tool_errors += 1

    def record_mistake(self) -> None:
        self.tool_mistakes += 1

    def record_verify(self, reward: float) -> None:
        self.verified += 1
        self.reward_sum += reward
        if reward >= self.pass_threshold:
            self.passed += 1

    def as_json(self, *, open_sessions: int, expired_sessions: int) -> dict[str, object]:
        count = self.verified
        return {
            "count": count,
            "mean_reward": self.reward_sum / count if count else None,
            "pass_rate": self.passed / count if count else None,
            "seeded": self.seeded,
            "tool_calls": dict(self.tool_calls),
            "tool_errors": self.tool_errors,
            "tool_mistakes": self.tool_mistakes,
            "open_sessions": open_sessions,
            "expired_sessions": expired_sessions,
        }
