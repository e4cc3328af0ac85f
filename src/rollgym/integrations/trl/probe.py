"""The trainer's side of the weight probe: its own log-probabilities of a fixed sequence.

After each optimizer step rollgym asks every model server for its log-probabilities of a
fixed token sequence (:mod:`rollgym.driver.weight_probe`) and compares them with the
trainer's. The trainer's numbers come from here: one forward pass of the very model TRL is
training, in eval mode (no dropout) and without gradients, so the check needs nothing from
the user but the token ids. torch is imported only when a probe is computed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol


class Parameter(Protocol):
    @property
    def device(self) -> object: ...


class ForwardModel(Protocol):
    """The part of a ``transformers.PreTrainedModel`` (a ``torch.nn.Module``) used here."""

    @property
    def training(self) -> bool: ...
    def train(self, mode: bool = True) -> object: ...
    def parameters(self) -> Iterator[Parameter]: ...
    def __call__(self, input_ids: object) -> object: ...


def trainer_logprobs(model: ForwardModel, token_ids: Sequence[int]) -> list[float]:
    """The log-probability of each of ``token_ids[1:]`` given the ones before it, under the
    model's current weights (computed in float32 from its logits, whatever its dtype)."""
    import torch

    ids = list(token_ids)
    device = next(model.parameters()).device
    was_training = model.training
    model.train(False)
    try:
        with torch.no_grad():
            answer = model(torch.tensor([ids], device=device))
            logits = answer.logits[0].float()  # type: ignore[attr-defined]  # a ModelOutput
            scores = torch.log_softmax(logits, dim=-1)
    finally:
        model.train(was_training)
    return [float(scores[position - 1, token]) for position, token in enumerate(ids) if position]
