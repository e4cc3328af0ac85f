"""TRL's ``GRPOTrainer`` trained on rollgym's rollouts (docs/training.md, "TRL").

``RollgymRollouts`` is the trainer's ``rollout_func`` and, through its callback, the way each
optimizer step's policy version (and weights) reaches the model servers; ``prompts_of`` builds
the dataset from rollgym rows; ``environment_reward`` hands the environment's reward to TRL.
Nothing here imports TRL, transformers or torch until a trainer calls it.
"""

from __future__ import annotations

from rollgym.integrations.trl.rollouts import (
    Batch,
    RollgymRollouts,
    environment_reward,
    prompts_of,
)
from rollgym.integrations.trl.samples import Columns, NoTokens

__all__ = [
    "Batch",
    "Columns",
    "NoTokens",
    "RollgymRollouts",
    "environment_reward",
    "prompts_of",
]
