"""A batch of rollgym groups as the columns TRL's ``GRPOTrainer`` takes from a ``rollout_func``.

TRL asks a rollout function for one row per completion: ``prompt_ids``, ``completion_ids`` and
``logprobs`` (the sampling engine's, per completion token), and takes every other key it
returns as a column the reward functions receive; ``env_mask`` is the one it reads itself (1: a
token the model generated, trained on; 0: a token the environment added, never trained on).

A rollout's recorded trajectory is already that row (:mod:`rollgym.trajectory.tokens`): the
first prompt, then everything after it, with the tool outputs and template tokens between the
model's turns masked 0. So nothing is re-tokenized here: the ids are the engine's own.

A rollout that failed (every attempt used up, or a ``stale`` result) has no completion, but
TRL needs one row per prompt: it gets a row with nothing to learn from (one ``filler`` token,
masked 0) and reward None, which TRL leaves out of its group's mean and gives no advantage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from rollgym.driver.outcomes import Outcome, RolloutFailure, RolloutResult
from rollgym.policy_versions import PolicyVersion
from rollgym.trajectory.tokens import token_sequence


class NoTokens(ValueError):
    """A result whose trajectory holds no token ids or log-probabilities to train on."""


@dataclass
class Columns:
    """What one ``rollout_func`` call returns, column by column (one entry per completion)."""

    prompt_ids: list[list[int]] = field(default_factory=list)
    completion_ids: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    #: 1 where the model generated the token, 0 where the environment (a tool's output, the
    #: chat template between turns) added it: TRL's loss leaves the zeros out.
    env_mask: list[list[int]] = field(default_factory=list)
    #: The environment's reward; None for a failed rollout (TRL: unscorable, no advantage).
    env_reward: list[float | None] = field(default_factory=list)
    #: The policy version of each model call of the rollout, in call order.
    policy_versions: list[list[PolicyVersion]] = field(default_factory=list)
    rollout_id: list[str | None] = field(default_factory=list)
    #: The failure's kind (``timeout``, ``stale`` ...) for a failed rollout, else None.
    error_kind: list[str | None] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[object]]:
        """The dict TRL's ``rollout_func`` must return."""
        return {
            "prompt_ids": list(self.prompt_ids),
            "completion_ids": list(self.completion_ids),
            "logprobs": list(self.logprobs),
            "env_mask": list(self.env_mask),
            "env_reward": list(self.env_reward),
            "policy_versions": list(self.policy_versions),
            "rollout_id": list(self.rollout_id),
            "error_kind": list(self.error_kind),
        }

    def add_group(self, group: Sequence[Outcome], filler: int, stale: Sequence[bool] = ()) -> None:
        """Append one group's rows, in rollout order; ``filler`` pads a failed member (its
        prompt is a sibling's, so the row is the group's like the others). ``stale``: per
        member, a result too old to train on by now (a row like a ``stale`` failure's)."""
        old = list(stale) or [False] * len(group)
        tokens = [None if isinstance(o, RolloutFailure) else _tokens_of(o) for o in group]
        prompt = next((t.prompt_ids for t in tokens if t is not None), [filler])
        for outcome, sample, too_old in zip(group, tokens, old, strict=True):
            self.rollout_id.append(outcome.rollout_id)
            if isinstance(outcome, RolloutFailure) or sample is None or too_old:
                self._add(prompt, _Tokens([], [filler], [0.0], [0]), None, [])
                self.error_kind.append(
                    outcome.error_kind if isinstance(outcome, RolloutFailure) else "stale"
                )
                continue
            if not sample.completion_ids:  # the engine generated nothing: TRL needs one token
                sample = _Tokens(sample.prompt_ids, [filler], [0.0], [0])
            self._add(sample.prompt_ids, sample, outcome.reward, outcome.policy_versions or [])
            self.error_kind.append(None)

    def _add(
        self,
        prompt: list[int],
        sample: _Tokens,
        reward: float | None,
        versions: list[PolicyVersion],
    ) -> None:
        self.prompt_ids.append(list(prompt))
        self.completion_ids.append(sample.completion_ids)
        self.logprobs.append(sample.logprobs)
        self.env_mask.append(sample.env_mask)
        self.env_reward.append(reward)
        self.policy_versions.append(list(versions))


class _Tokens(NamedTuple):
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    env_mask: list[int]


def _tokens_of(result: RolloutResult) -> _Tokens:
    """One result's trajectory as TRL's row."""
    sequence = None if result.trajectory is None else token_sequence(result.trajectory)
    if sequence is None:
        raise NoTokens(
            f"rollout {result.rollout_id}: its trajectory has no token ids; open the Collector "
            "with capture_tokens=True, on a model server that answers them (vLLM, simulated)"
        )
    if not sequence.logprobs_complete:
        raise NoTokens(
            f"rollout {result.rollout_id}: the engine answered token ids without "
            "log-probabilities for some model call; TRL needs the sampling log-probabilities"
        )
    return _Tokens(
        sequence.prompt_ids, sequence.completion_ids, sequence.logprobs, sequence.loss_mask
    )
