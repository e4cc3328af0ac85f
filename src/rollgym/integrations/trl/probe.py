"""The trainer's side of the weight probe: its own log-probabilities of a fixed sequence.

After each optimizer step rollgym asks every model server for its log-probabilities of a
fixed token sequence (:mod:`rollgym.driver.weight_probe`) and compares them with the
trainer's. The trainer's numbers come from here: one forward pass of the very model TRL is
training, in eval mode (no dropout) and without gradients, so the check needs nothing from
the user but the token ids. The same forward pass over a batch's own samples gives the
train/inference gap of ordinary samples (:func:`sample_gap`). torch is imported only when
either is computed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from rollgym.integrations.trl.samples import Columns
from rollgym.records import fields_record


class Parameter(Protocol):
    @property
    def device(self) -> object: ...


class ForwardModel(Protocol):
    """The part of a ``transformers.PreTrainedModel`` (a ``torch.nn.Module``) used here."""

    training: bool

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


@dataclass(frozen=True)
class SampleGap:
    """The train/inference gap of one batch's samples: the engine's log-probability of each
    token the model generated against the trainer's, for the samples every model call of
    which ran under the weights the trainer holds now (``version``)."""

    version: int
    samples: int
    tokens: int
    mean_abs_diff: float
    max_abs_diff: float

    def as_dict(self) -> dict[str, object]:
        return fields_record(self)


def sample_gap(model: ForwardModel, version: int, columns: Columns) -> SampleGap | None:
    """The gap over ``columns``' samples made wholly at ``version`` (None: there are none).

    One forward pass of each sample (its prompt and completion ids, no gradients); only the
    tokens the model generated count (``env_mask`` 1), each held to the logprob the engine
    answered when it sampled it."""
    diffs: list[float] = []
    samples = 0
    for prompt, completion, engine, mask, versions, error in zip(
        columns.prompt_ids,
        columns.completion_ids,
        columns.logprobs,
        columns.env_mask,
        columns.policy_versions,
        columns.error_kind,
        strict=True,
    ):
        if error is not None or not versions or set(versions) != {version} or not any(mask):
            continue
        ours = trainer_logprobs(model, [*prompt, *completion])[-len(completion) :]
        diffs += [abs(a - b) for a, b, m in zip(ours, engine, mask, strict=True) if m]
        samples += 1
    if not diffs:
        return None
    return SampleGap(version, samples, len(diffs), sum(diffs) / len(diffs), max(diffs))
