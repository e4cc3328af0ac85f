"""One rollout id, one rollout: refuse a row whose explicit ``rollout_id`` collides with another.

Ids are derived (:func:`rollgym.identity.make_rollout_id`): a row with ``rollout_id: dup``
and ``run.repeats: 2`` runs ``dup`` and ``dup-r1``, retried as ``dup-a1``, ``dup-r1-a1``...
An explicit id can therefore collide not only with the same explicit id on another row but
with a derived one: ``dup-r1`` on a later row is repeat 1 of ``dup``; ``dup-a1`` is its retry;
``3-0`` is the automatic id of task 3. Such a row would write the same id twice to
``rollouts.jsonl`` and mix two rollouts in one trace, so the later row becomes one
``invalid_row`` failure naming both lines, and nothing of it runs.

Memory stays bounded by the rows that *have* explicit ids (a dict of them) plus one byte per
row (whether it got an automatic id); rows without explicit ids cost one append.
"""

from __future__ import annotations

import re

from rollgym.identity import make_rollout_id

_REPEAT = re.compile(r"^(.+)-r([1-9][0-9]*)$")
_ATTEMPT = re.compile(r"^(.+)-a([1-9][0-9]*)$")
_AUTO = re.compile(r"^(0|[1-9][0-9]*)-(0|[1-9][0-9]*)$")


class UniqueIds:
    """Claims the ids of each row in input order; :meth:`claim` says why a row cannot have its.

    ``repeats`` and ``max_attempts`` bound the derived ids a row can produce.
    """

    def __init__(self, repeats: int, max_attempts: int) -> None:
        self.repeats = repeats
        self.max_attempts = max_attempts
        #: explicit rollout id -> the 1-based line of the row that has it
        self._explicit: dict[str, int] = {}
        #: (task_index, rollout_index) claimed by an explicit id shaped like an automatic one
        self._auto_claims: dict[tuple[int, int], int] = {}
        #: per task index: 1 when the row runs under automatic ids (so ``3-0`` is taken)
        self._automatic = bytearray()

    def claim(self, explicit: str | None, task_index: int, line: int) -> str | None:
        """Register the row at ``task_index``; None when its ids are free, else why not."""
        if task_index >= len(self._automatic):
            self._automatic.extend(b"\0" * (task_index + 1 - len(self._automatic)))
        if explicit is None:
            problem = self._auto_taken(task_index)
            if problem is None:
                self._automatic[task_index] = 1
            return problem
        problem = self._explicit_taken(explicit)
        if problem is None:
            self._explicit[explicit] = line
            self._claim_auto_shapes(explicit, line)
        return problem

    def _claim_auto_shapes(self, explicit: str, line: int) -> None:
        """Ids of this row shaped like a later row's automatic ids (``5-0``, ``5-0-a1``)."""
        for rollout_index in range(self.repeats):
            for attempt in range(self.max_attempts):
                mine = make_rollout_id(explicit, 0, rollout_index, attempt)
                for base, repeat, _ in _decompositions(mine):
                    auto = _auto_like(base) if repeat == 0 else None
                    if auto is not None and auto[1] < self.repeats:
                        self._auto_claims.setdefault(auto, line)

    def _auto_taken(self, task_index: int) -> str | None:
        if not self._auto_claims:
            return None
        for rollout_index in range(self.repeats):
            line = self._auto_claims.get((task_index, rollout_index))
            if line is not None:
                rollout_id = make_rollout_id(None, task_index, rollout_index, 0)
                return (
                    f"the automatic rollout id {rollout_id!r} of this row is already the "
                    f"explicit rollout_id of line {line}; explicit rollout ids must be unique"
                )
        return None

    def _explicit_taken(self, explicit: str) -> str | None:
        """Whether any id this row would produce is one an earlier row produces."""
        for rollout_index in range(self.repeats):
            for attempt in range(self.max_attempts):
                mine = make_rollout_id(explicit, 0, rollout_index, attempt)
                owner = self._owner(mine)
                if owner is not None:
                    return (
                        f"rollout id {mine!r} (repeat {rollout_index}, attempt {attempt} of "
                        f"rollout_id {explicit!r}) is already {owner}; explicit rollout ids "
                        "must be unique"
                    )
        return None

    def _owner(self, rollout_id: str) -> str | None:
        """Which earlier row produces ``rollout_id``, in words; None when none does."""
        for base, rollout_index, attempt in _decompositions(rollout_id):
            if rollout_index >= self.repeats or attempt >= self.max_attempts:
                continue
            line = self._explicit.get(base)
            if line is not None:
                return _which(base, rollout_index, attempt, f"line {line}")
            auto = _auto_like(base) if rollout_index == 0 else None
            if auto is not None:
                task_index, auto_index = auto
                if (
                    auto_index < self.repeats
                    and task_index < len(self._automatic)
                    and self._automatic[task_index]
                ):
                    return _which(base, 0, attempt, f"task {task_index} (its automatic id)")
        return None


def _which(base: str, rollout_index: int, attempt: int, row: str) -> str:
    what = f"repeat {rollout_index}" if rollout_index else "the id"
    if attempt:
        what += f", attempt {attempt},"
    return f"{what} of {base!r} on {row}"


def _decompositions(rollout_id: str) -> list[tuple[str, int, int]]:
    """Every way ``rollout_id`` reads as ``base[-r<k>][-a<n>]``: (base, k, n)."""
    found = [(rollout_id, 0, 0)]
    heads = [(rollout_id, 0)]
    attempt = _ATTEMPT.match(rollout_id)
    if attempt is not None:
        found.append((attempt.group(1), 0, int(attempt.group(2))))
        heads.append((attempt.group(1), int(attempt.group(2))))
    for head, attempt_no in heads:
        repeat = _REPEAT.match(head)
        if repeat is not None:
            found.append((repeat.group(1), int(repeat.group(2)), attempt_no))
    return found


def _auto_like(rollout_id: str) -> tuple[int, int] | None:
    """``(task_index, rollout_index)`` when ``rollout_id`` has the automatic ``3-0`` shape."""
    match = _AUTO.match(rollout_id)
    return (int(match.group(1)), int(match.group(2))) if match else None
