"""Reward spread within groups: the repeats of one task, as GRPO-style training sees them.

Why it matters: a group-relative advantage is a reward minus its group's mean, so a group whose
rewards are all equal (all passed, or all failed) teaches the trainer nothing. The share of such
*zero-variance* groups says how much of a run's compute was spent on tasks too easy or too hard
for the policy. A group here is the completed rollouts of one task index (its failures carry no
reward); a group with a single reward has no spread either, so it counts as zero-variance.

One piece of code answers everywhere: :class:`GroupSpread` is fed by the run's
:class:`~rollgym.driver.summary.Aggregator` (``summary.json``, resume included) and by
:func:`~rollgym.reading.group_view.run_groups` reading ``rollouts.jsonl`` (``rollgym traces
profile`` and the viewer's group view). Per task it keeps five numbers in ``array`` columns (36 bytes: a 300,000-task run
costs about 11 MB) and adds a reward in about 0.4 µs.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator
from itertools import repeat
from typing import TypedDict


class GroupRow(TypedDict):
    """One task's group: its reward spread and whether it is zero-variance."""

    task_index: int
    n: int
    min: float
    max: float
    mean: float
    std: float
    zero_variance: bool


class SpreadSummary(TypedDict):
    """``summary.json``'s ``groups`` block (also the head of ``traces profile``'s)."""

    size: int
    groups: int
    zero_variance: int
    zero_variance_share: float | None
    mean_std: float | None
    short_groups: int


class GroupSpread:
    """Per task: count, min, max, sum and sum of squares of its rewards."""

    __slots__ = ("size", "_n", "_min", "_max", "_sum", "_sq")

    def __init__(self, size: int) -> None:
        #: The repeats of a task: how many rewards a whole group has.
        self.size = size
        self._n: array[int] = array("I")
        self._min: array[float] = array("d")
        self._max: array[float] = array("d")
        self._sum: array[float] = array("d")
        self._sq: array[float] = array("d")

    def add(self, task_index: int, reward: float) -> None:
        """Count one completed rollout's reward in its task's group."""
        if task_index >= len(self._n):
            self._grow(task_index)
        self._n[task_index] += 1
        if reward < self._min[task_index]:
            self._min[task_index] = reward
        if reward > self._max[task_index]:
            self._max[task_index] = reward
        self._sum[task_index] += reward
        self._sq[task_index] += reward * reward

    def _grow(self, index: int) -> None:
        """Make every column hold ``index``; grow by half so slack stays small on huge inputs."""
        more = max(index + 1 - len(self._n), len(self._n) // 2, 1024)
        self._n.extend(repeat(0, more))
        self._min.extend(repeat(math.inf, more))
        self._max.extend(repeat(-math.inf, more))
        self._sum.extend(repeat(0.0, more))
        self._sq.extend(repeat(0.0, more))

    def row(self, task_index: int) -> GroupRow | None:
        """The group of one task; None when it has no completed rollout."""
        if task_index >= len(self._n) or not self._n[task_index]:
            return None
        n = self._n[task_index]
        low, high = self._min[task_index], self._max[task_index]
        mean = self._sum[task_index] / n
        # population std: the spread the group-relative advantage divides by
        variance = max(0.0, self._sq[task_index] / n - mean * mean)
        zero = n < 2 or low == high
        return GroupRow(
            task_index=task_index,
            n=n,
            min=low,
            max=high,
            mean=mean,
            std=0.0 if low == high else math.sqrt(variance),
            zero_variance=zero,
        )

    def rows(self) -> Iterator[GroupRow]:
        """Every group with a reward, by task index."""
        for task_index in range(len(self._n)):
            row = self.row(task_index)
            if row is not None:
                yield row

    def summary(self) -> SpreadSummary:
        """How many groups, how many of them zero-variance, their mean std."""
        groups = zero = short = 0
        std_sum = 0.0
        for row in self.rows():
            groups += 1
            zero += row["zero_variance"]
            short += row["n"] < self.size
            std_sum += row["std"]
        return SpreadSummary(
            size=self.size,
            groups=groups,
            zero_variance=zero,
            zero_variance_share=round(zero / groups, 6) if groups else None,
            mean_std=round(std_sum / groups, 6) if groups else None,
            short_groups=short,
        )
