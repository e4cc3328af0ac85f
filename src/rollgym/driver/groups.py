"""Whole groups for the trainer: the ``size`` repeats of one task, handed over together.

GRPO-style advantages compare the rollouts of one task with each other, so a trainer wants
them as one unit, as soon as the last of them is done, not in finishing order. A failure is
data here too: a group with failed members still comes out, with its
:class:`~rollgym.driver.outcomes.RolloutFailure` records in it (an input line that could not
be read is a group of that one failure). On resume, the outcomes of an earlier session join
their groups and are not run again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from rollgym.driver.outcomes import Outcome, RolloutFailure

#: A failure kind that a resume runs again, so it does not count as finished.
_RUN_AGAIN = "cancelled"


def finished_key(outcome: Outcome) -> tuple[int, int] | None:
    """(task index, rollout index) of an outcome a resume keeps; None for one run again."""
    if isinstance(outcome, RolloutFailure):
        if outcome.error_kind == _RUN_AGAIN:
            return None
        return outcome.task_index, outcome.rollout_index if outcome.rollout_index is not None else 0
    return outcome.task_index, outcome.rollout_index


class GroupBuffer:
    """Collects outcomes per task until ``size`` of them are there; oldest task first at the end."""

    __slots__ = ("size", "_open", "finished")

    def __init__(self, size: int, finished: Iterable[Outcome] = ()) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.size = size
        self._open: dict[int, list[Outcome]] = {}
        #: (task index, rollout index) of the earlier session's outcomes: not run again.
        self.finished: set[tuple[int, int]] = set()
        for outcome in finished:
            key = finished_key(outcome)
            if key is not None and key not in self.finished:
                self.finished.add(key)
                self._open.setdefault(outcome.task_index, []).append(outcome)

    def skip(self, task_index: int, rollout_index: int) -> bool:
        return (task_index, rollout_index) in self.finished

    def whole_at_start(self) -> Iterator[list[Outcome]]:
        """Groups the earlier session already finished (they come out first)."""
        for task_index in [t for t, members in self._open.items() if self._whole(members)]:
            yield self._close(task_index)

    def add(self, outcome: Outcome) -> list[Outcome] | None:
        """Add one outcome; the whole group when this one completed it."""
        if isinstance(outcome, RolloutFailure) and outcome.rollout_index is None:
            return [outcome]  # an unreadable line: no repeats will follow
        members = self._open.setdefault(outcome.task_index, [])
        members.append(outcome)
        return self._close(outcome.task_index) if self._whole(members) else None

    def leftovers(self) -> Iterator[list[Outcome]]:
        """Groups still short when the stream ended (it was interrupted): handed over as they are."""
        for task_index in sorted(self._open):
            yield self._close(task_index)

    def _whole(self, members: list[Outcome]) -> bool:
        return len({self._index(m) for m in members}) >= self.size

    @staticmethod
    def _index(outcome: Outcome) -> int:
        return outcome.rollout_index if outcome.rollout_index is not None else 0

    def _close(self, task_index: int) -> list[Outcome]:
        members = self._open.pop(task_index)
        return sorted(members, key=self._index)
