"""The ``transformers.TrainerCallback`` that tells rollgym each new policy version.

Kept apart from :mod:`.rollouts` because it must subclass a transformers class: this module
imports transformers only when :func:`version_callback` is called, so the rest of the integration (and every rollgym
module) imports without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from rollgym.integrations.trl.probe import ForwardModel


class TrainerState(Protocol):
    """The part of ``transformers.TrainerState`` read here."""

    @property
    def global_step(self) -> int: ...


class SavesWeights(Protocol):
    """A model that writes its weights to a folder (``PreTrainedModel.save_pretrained``)."""

    def save_pretrained(self, save_directory: str) -> object: ...


class TrainedModel(SavesWeights, ForwardModel, Protocol):
    """The model TRL trains: it saves its weights and computes the probe's log-probabilities."""


def version_callback(push: Callable[[int, TrainedModel | None], None]) -> object:
    """A callback whose ``on_step_end`` (after each optimizer step; ``state.global_step`` is
    the new step) calls ``push(step, model)``."""
    from transformers import TrainerCallback

    class RollgymVersionPush(TrainerCallback):  # type: ignore[misc]  # transformers is untyped here
        def on_step_end(
            self,
            args: object,
            state: TrainerState,
            control: object,
            model: TrainedModel | None = None,
            **kwargs: object,
        ) -> None:
            push(state.global_step, model)

    return RollgymVersionPush()
