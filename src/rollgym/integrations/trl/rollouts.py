"""TRL's ``GRPOTrainer`` taking its completions from rollgym agents and environments.

``GRPOTrainer(rollout_func=...)`` (TRL 1.16) calls ``rollout_func(prompts, trainer)`` with the
prompts of one generation batch, each repeated ``num_generations`` times in a row, and expects
one completion per prompt back (:mod:`.samples` says what each column holds).
:class:`RollgymRollouts` is that function: each distinct prompt is a rollgym row (the dataset
holds them as JSON text, :func:`prompts_of`), each run of repeats one rollgym group, collected
with :meth:`Collector.groups <rollgym.Collector.groups>` on the Collector's own event loop
(:mod:`rollgym.integrations.loop_thread`): single-turn, multi-turn and tool-using agents alike,
and environment episodes.

The policy version is the trainer's step: after each optimizer step the callback
(:meth:`RollgymRollouts.callback`) sets it on the Collector (``set_policy_version``, which
waits until every model server has it), with the new weights saved to disk for the model
servers to load when ``weights_dir`` is given. A rollout dispatched after that carries the
new version on every model call, so step ``k``'s samples carry version ``k``.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

import orjson

from rollgym.driver.outcomes import Outcome, RolloutFailure
from rollgym.driver.output import OutcomeWriter
from rollgym.driver.weight_probe import DEFAULT_BOUND, Probe, ProbeGap
from rollgym.integrations.loop_thread import LoopThread
from rollgym.integrations.trl.ahead import GroupsAhead, too_old
from rollgym.integrations.trl.callback import TrainedModel, TrainerState, version_callback
from rollgym.integrations.trl.probe import SampleGap, sample_gap, trainer_logprobs
from rollgym.integrations.trl.samples import Columns
from rollgym.policy_versions import PolicyVersion
from rollgym.records import fields_record

if TYPE_CHECKING:
    from rollgym.driver.collector import Collector


class GrpoTrainer(Protocol):
    """The part of ``trl.GRPOTrainer`` a rollout function reads: attributes the trainer sets in
    its ``__init__`` (read here, never written)."""

    state: TrainerState
    model: TrainedModel
    num_generations: int
    num_generations_eval: int
    eos_token_ids: Sequence[int]


def prompts_of(rows: Iterable[Mapping[str, object]]) -> list[dict[str, str]]:
    """The training dataset for ``GRPOTrainer``: one ``{"prompt": <the row as JSON>}`` per
    rollgym row (``datasets.Dataset.from_list(prompts_of(rows))``). The agent or environment
    builds the real prompt from the row; TRL only hands the text back to the rollout function."""
    return [
        {"prompt": orjson.dumps(dict(row), option=orjson.OPT_SORT_KEYS).decode()} for row in rows
    ]


def environment_reward(*, env_reward: list[float | None], **_: object) -> list[float | None]:
    """A reward function for ``GRPOTrainer(reward_funcs=[...])``: the environment's reward of
    each rollout (None for a failed one: TRL gives it no advantage)."""
    return list(env_reward)


@dataclass(frozen=True)
class Batch:
    """What one ``rollout_func`` call collected: the trainer's step, the version it set, and
    per completion its rollout id, its model calls' versions, its reward, and how many of its
    completion tokens the model generated (trained on) and the environment added (masked)."""

    step: int
    rollout_ids: list[str | None]
    policy_versions: list[list[PolicyVersion]]
    rewards: list[float | None]
    failures: int
    model_tokens: list[int]
    env_tokens: list[int]
    #: The weight probe's gap at this step's version (None: no probe was given).
    probe: ProbeGap | None = None
    #: The train/inference log-probability gap of this batch's samples made at ``step``
    #: (None: not asked for, ``sample_gaps=False``, or no such sample).
    sample_gap: SampleGap | None = None

    def as_dict(self) -> dict[str, object]:
        """Every field in order; the probe's gap without its replica's name and URL."""
        probe, gap = self.probe, self.sample_gap
        record = fields_record(self)
        record["probe"] = None if probe is None else fields_record(probe, leave_out=_REPLICA)
        record["sample_gap"] = None if gap is None else gap.as_dict()
        return record


#: A probe gap's fields a batch leaves out: which replica answered, not what it answered.
_REPLICA = ("server", "url")


class RollgymRollouts:
    """``GRPOTrainer(rollout_func=rollouts, callbacks=[rollouts.callback()])``.

    ``collector``: a :class:`~rollgym.Collector` opened with ``capture_tokens=True`` (and its
    ``model_servers``, so each version reaches them). Use it as a context manager around
    ``trainer.train()``: it opens the Collector on a loop thread and closes both at the end.
    ``output_dir``: every outcome is also written there as ``rollgym run`` writes it
    (``rollouts.jsonl``, ``trajectories.jsonl``, ``failures.jsonl``), so ``rollgym traces check
    DIR --data`` certifies what the trainer learned from. ``weights_dir``: after each optimizer
    step the model is saved to ``weights_dir/step-<k>`` and the model servers load it with
    version ``k`` (the previous step's folder is then removed). ``probe_token_ids``: a fixed
    token sequence; at each new version the trainer's model computes its log-probabilities of
    it (no gradients) and every model server's engine is checked against them
    (``Probe(..., bound=probe_bound)``; the gaps are :attr:`probe_gaps` and each
    :class:`Batch`'s ``probe``). ``timeout_s``: the longest one generation batch may take
    (None: no limit). ``ahead``: an endless iterable of rollgym rows (``itertools.cycle(rows)``)
    to collect from in the background, one batch ahead of the trainer, so generation and
    training overlap (:mod:`.ahead`; bounded by the Collector's ``max_staleness``, 1 is the
    usual): the dataset's prompts then only count how many groups a batch takes.
    ``sample_gaps``: per batch, the trainer's model also scores the samples made under the
    weights it holds and compares its log-probabilities with the engine's (:class:`Batch`'s
    ``sample_gap``; one extra forward pass of the batch, no gradients).
    """

    def __init__(
        self,
        collector: Collector,
        *,
        output_dir: str | Path | None = None,
        weights_dir: str | Path | None = None,
        probe_token_ids: Sequence[int] | None = None,
        probe_bound: float = DEFAULT_BOUND,
        ahead: Iterable[Mapping[str, object]] | None = None,
        sample_gaps: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        if probe_token_ids is not None:  # refused here, before a trainer starts
            Probe(list(probe_token_ids), [0.0] * (len(probe_token_ids) - 1), bound=probe_bound)
        self._collector = collector
        self._probe_ids = None if probe_token_ids is None else list(probe_token_ids)
        self._probe_bound = probe_bound
        self._ahead_rows = ahead
        self._ahead: GroupsAhead | None = None
        self._sample_gaps = sample_gaps
        self._output_dir = None if output_dir is None else Path(output_dir)
        self._weights_dir = None if weights_dir is None else Path(weights_dir)
        self._timeout_s = timeout_s
        self._thread: LoopThread | None = None
        self._writer: OutcomeWriter | None = None
        self._generation = 0
        self._saved: Path | None = None
        #: One entry per ``rollout_func`` call, in order.
        self.batches: list[Batch] = []

    def __enter__(self) -> RollgymRollouts:
        thread = LoopThread("rollgym-trl")
        try:
            thread.call(self._collector.__aenter__())
        except BaseException:
            thread.close()
            raise
        self._thread = thread
        if self._output_dir is not None:
            self._writer = OutcomeWriter(self._output_dir)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        thread, self._thread = self._thread, None
        ahead, self._ahead = self._ahead, None
        try:
            if thread is not None and ahead is not None:
                thread.call(ahead.close(), timeout=60)
            if thread is not None:
                thread.call(self._collector.__aexit__(kind, error, traceback), timeout=60)
        finally:
            if thread is not None:
                thread.close()
            if self._writer is not None:
                self._writer.close()
                self._writer = None

    def _loop(self) -> LoopThread:
        if self._thread is None:
            raise RuntimeError("use RollgymRollouts inside 'with' around trainer.train()")
        return self._thread

    def __call__(self, prompts: list[str], trainer: GrpoTrainer) -> dict[str, list[object]]:
        """TRL's ``rollout_func``: one rollgym group per run of ``num_generations`` prompts."""
        loop = self._loop()
        step = trainer.state.global_step
        if self._collector.policy_version != step:  # the first batch, or no callback
            self.push(step, trainer.model)
        size = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        if self._ahead_rows is not None and trainer.model.training:
            groups = loop.call(self._take_ahead(len(prompts), size), timeout=self._timeout_s)
        else:
            rows = _rows_of(prompts, size, prefix=f"g{self._generation}")
            self._generation += 1
            groups = loop.call(self._collect(rows, size), timeout=self._timeout_s)
        columns = Columns()
        bound = self._collector.max_staleness
        for group in groups:
            old = [too_old(outcome, step, bound) for outcome in group]
            columns.add_group(group, filler=trainer.eos_token_ids[0], stale=old)
        self.batches.append(
            Batch(
                step=step,
                rollout_ids=columns.rollout_id,
                policy_versions=columns.policy_versions,
                rewards=columns.env_reward,
                failures=sum(kind is not None for kind in columns.error_kind),
                model_tokens=[sum(mask) for mask in columns.env_mask],
                env_tokens=[len(mask) - sum(mask) for mask in columns.env_mask],
                probe=self._gap_of(step),
                sample_gap=sample_gap(trainer.model, step, columns) if self._sample_gaps else None,
            )
        )
        return columns.as_dict()

    async def _take_ahead(self, prompts: int, size: int) -> list[list[Outcome]]:
        """The next batch's groups from the background collection (started on the first)."""
        if prompts % size:
            raise ValueError(
                f"TRL handed {prompts} prompts, not a multiple of num_generations={size}"
            )
        if self._ahead is None:
            assert self._ahead_rows is not None
            self._ahead = GroupsAhead(self._collector, self._ahead_rows, size=size)
        groups = await self._ahead.take(prompts // size)
        for group in groups:
            for outcome in group:
                if self._writer is not None:
                    self._writer.write(outcome)
        return [_whole(group, size) for group in groups]

    async def _collect(self, rows: list[dict[str, object]], size: int) -> list[list[Outcome]]:
        """Every group of ``rows``, in the rows' order (the Collector yields them as they end)."""
        by_task: dict[int, list[Outcome]] = {}
        async for group in self._collector.groups(rows, size=size):
            for outcome in group:
                if self._writer is not None:
                    self._writer.write(outcome)
            by_task[group[0].task_index] = group
        missing = [index for index in range(len(rows)) if index not in by_task]
        if missing:
            raise RuntimeError(f"rollgym returned no group for rows {missing} of this batch")
        return [_whole(by_task[index], size) for index in range(len(rows))]

    @property
    def probe_gaps(self) -> list[ProbeGap]:
        """Every probe's gap so far, per version and model server replica, in order."""
        return self._collector.probe_gaps

    def _gap_of(self, version: int) -> ProbeGap | None:
        """The largest probe gap at ``version`` over the replicas (None: none checked)."""
        gaps = [g for g in self._collector.probe_gaps if g.version == version]
        return max(gaps, key=lambda g: math.inf if g.max_abs_diff is None else g.max_abs_diff,
                   default=None)  # fmt: skip

    def push(self, version: int, model: TrainedModel | None = None) -> None:
        """Set ``version`` on the Collector and wait until every model server has it; with
        ``weights_dir``, save ``model`` first and have the servers load it; with
        ``probe_token_ids``, check the engines against ``model``'s log-probabilities."""
        path: Path | None = None
        if self._weights_dir is not None and model is not None:
            path = self._weights_dir / f"step-{version}"
            model.save_pretrained(str(path))
        probe: Probe | None = None
        if self._probe_ids is not None and model is not None:
            numbers = trainer_logprobs(model, self._probe_ids)
            probe = Probe(self._probe_ids, numbers, bound=self._probe_bound)
        self._loop().call(self._push(version, path, probe))
        if path is not None:
            if self._saved is not None and self._saved != path:
                shutil.rmtree(self._saved, ignore_errors=True)
            self._saved = path

    async def _push(self, version: int, path: Path | None, probe: Probe | None) -> None:
        await self._collector.set_policy_version(version, weights=path, probe=probe)

    def callback(self) -> object:
        """A ``transformers.TrainerCallback`` that pushes the new version (and weights) after
        each optimizer step."""
        return version_callback(self.push)


def _rows_of(prompts: Sequence[str], size: int, *, prefix: str) -> list[dict[str, object]]:
    """The rollgym row of each run of ``size`` equal prompts, with a rollout id unique to this
    batch (``<prefix>-<group>``; the repeats become ``-r1``, ``-r2`` ...)."""
    if size < 1 or len(prompts) % size:
        raise ValueError(
            f"TRL handed {len(prompts)} prompts, not a multiple of num_generations={size}"
        )
    rows: list[dict[str, object]] = []
    for start in range(0, len(prompts), size):
        run = prompts[start : start + size]
        if any(prompt != run[0] for prompt in run):
            raise ValueError(
                f"prompts {start}..{start + size - 1}: TRL's repeats of one prompt are not together"
            )
        rows.append({**_row_of(run[0], start), "rollout_id": f"{prefix}-{len(rows)}"})
    return rows


def _row_of(prompt: object, index: int) -> dict[str, object]:
    """The rollgym row a dataset prompt holds (:func:`prompts_of` wrote it)."""
    try:
        row = orjson.loads(prompt) if isinstance(prompt, str | bytes) else None
    except orjson.JSONDecodeError:
        row = None
    if not isinstance(row, dict):
        raise ValueError(
            f"prompt {index} is not a rollgym row as JSON; build the dataset with "
            "rollgym.integrations.trl.prompts_of(rows)"
        )
    return row


def _whole(group: list[Outcome], size: int) -> list[Outcome]:
    """A group of ``size`` members (a short one, an unreadable row or cut by an interrupt, is
    refused, with the failure that says why)."""
    if len(group) != size:
        first = group[0]
        where = first.rollout_id or f"row {first.task_index}"
        why = f": {first.error_kind}: {first.message}" if isinstance(first, RolloutFailure) else ""
        raise RuntimeError(f"group of {where}: {len(group)} of {size} rollouts came back{why}")
    return group
